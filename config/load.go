package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Read reads the configuration at paths: YAML files, or directories whose *.yaml and
// *.yml files (not subdirectories, not hidden files) are read in name order. Every
// object gets a status (Config.Objects); the ready ones make up the configuration. The
// error is only for what could not be read at all (a missing file, a bad option).
func Read(paths []string, opts ...Option) (*Config, error) {
	st, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	files, err := readFiles(paths)
	if err != nil {
		return nil, err
	}
	refs, err := readRefs(st.refsFile)
	if err != nil {
		return nil, err
	}
	return load(files, refs, st)
}

// Load reads the configuration at path (a file or a directory) like Read, and fails
// unless every object Sluice runs is ready: the error names each file, object and field
// at fault (Config.Err).
func Load(path string, opts ...Option) (*Config, error) {
	cfg, err := Read([]string{path}, opts...)
	if err != nil {
		return nil, err
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Document is one YAML or JSON document of a configuration that is not read from files,
// such as an object from a Kubernetes API server. Name stands for the file name: it is
// ObjectStatus.File and names the object in messages.
type Document struct {
	Name string
	Data []byte
}

// ReadDocuments reads a configuration from docs the way Read reads files, each Document
// as a file of that name, with the same checks and bounds: the documents together are
// at most MaxConfigBytes and expand to at most MaxExpandedBytes. WithPrevious keeps the
// last good version of an object that is now invalid, as Watch does.
func ReadDocuments(docs []Document, opts ...Option) (*Config, error) {
	st, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	files := make([]fileData, 0, len(docs))
	left := int64(MaxConfigBytes)
	for _, d := range docs {
		if left -= int64(len(d.Data)); left < 0 {
			return nil, fmt.Errorf("config: %s: the configuration's documents together are larger than %s (config.MaxConfigBytes)", d.Name, mib(MaxConfigBytes))
		}
		files = append(files, fileData{d.Name, d.Data})
	}
	refs, err := readRefs(st.refsFile)
	if err != nil {
		return nil, err
	}
	return load(files, refs, st)
}

// fileData is one file's name and content.
type fileData struct {
	name string
	data []byte
}

// readFiles lists and reads the configuration files at paths, at most MaxConfigBytes
// together.
func readFiles(paths []string) ([]fileData, error) {
	names, err := listFiles(paths)
	if err != nil {
		return nil, err
	}
	var files []fileData
	left := int64(MaxConfigBytes)
	for _, n := range names {
		b, err := readBounded(n, left, "the configuration's files together are")
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		left -= int64(len(b))
		files = append(files, fileData{n, b})
	}
	return files, nil
}

// listFiles names the configuration files at paths: each path that is a file, and the
// *.yaml and *.yml files of each that is a directory (not subdirectories, not hidden
// files), in name order.
func listFiles(paths []string) ([]string, error) {
	var files []string
	for _, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if !fi.IsDir() {
			files = append(files, path)
			continue
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		var names []string
		for _, e := range entries {
			n := e.Name()
			ext := filepath.Ext(n)
			if e.IsDir() || strings.HasPrefix(n, ".") || (ext != ".yaml" && ext != ".yml") {
				continue
			}
			names = append(names, filepath.Join(path, n))
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("config: %s: no *.yaml or *.yml files", path)
		}
		sort.Strings(names)
		files = append(files, names...)
	}
	return files, nil
}

// splitDocuments splits a multi-document YAML stream at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for line := range bytes.Lines(data) {
		t := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(t, []byte("---")) || bytes.HasPrefix(line, []byte("--- ")) {
			docs = append(docs, cur)
			cur = append([]byte(nil), bytes.TrimPrefix(line, []byte("---"))...)
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

// load parses files and resolves them into a configuration. The error is for a
// configuration whose documents expand beyond MaxExpandedBytes: nothing of it is used.
func load(files []fileData, refs []RefEntry, st *settings) (*Config, error) {
	l := &loader{st: st, refs: refs, seen: map[string]*parsed{}}
	cfg := &Config{good: map[string]*parsed{}}
	left := int64(MaxExpandedBytes)
	for _, f := range files {
		cfg.Files = append(cfg.Files, f.name)
		if len(bytes.TrimSpace(f.data)) == 0 {
			l.empty = append(l.empty, f.name)
		}
		n := 0
		for _, doc := range splitDocuments(f.data) {
			// Measured before anything converts the document: an alias bomb is refused
			// while it is still small.
			if left -= expandedSize(doc, left); left < 0 {
				return nil, fmt.Errorf("config: %s: the configuration's documents expand to more than %s with their YAML aliases (config.MaxExpandedBytes; each use of an alias counts what it names)",
					f.name, mib(MaxExpandedBytes))
			}
			l.document(f.name, &n, doc)
		}
	}
	l.resolve(cfg)
	return cfg, nil
}

// loader is the state of one load.
type loader struct {
	st      *settings
	refs    []RefEntry
	objects []*parsed          // in file order
	seen    map[string]*parsed // by key, the first definition
	empty   []string           // the files that are empty (or only white space)
}

// document parses one YAML document of file; n counts the documents (and List items)
// of the file so far.
func (l *loader) document(file string, n *int, doc []byte) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		*n++
		p := l.newParsed(file, *n, lenientObject(doc))
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		if strings.Contains(msg, "already set in map") || strings.Contains(msg, "already defined") {
			msg += " (a key given twice; if two objects run together, separate them with a line \"---\")"
		}
		p.fail("invalid YAML: %s", msg)
		l.add(p)
		return
	}
	if s := bytes.TrimSpace(js); bytes.Equal(s, []byte("null")) || len(s) == 0 {
		return // an empty document
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		*n++
		p := l.newParsed(file, *n, object{})
		p.fail("not a Kubernetes object (a YAML mapping with apiVersion, kind, metadata, spec)")
		l.add(p)
		return
	}
	if raw["kind"] == kindList && raw["apiVersion"] == "v1" {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(js, &list); err != nil {
			*n++
			p := l.newParsed(file, *n, object{Kind: kindList})
			p.fail("items: must be a list of objects")
			l.add(p)
			return
		}
		for _, item := range list.Items {
			*n++
			l.object(file, *n, item)
		}
		return
	}
	*n++
	l.object(file, *n, js)
}

// lenientObject decodes what it can of a document that is not valid strict YAML, to name
// the object in the message.
func lenientObject(doc []byte) object {
	var o object
	if js, err := yaml.YAMLToJSON(doc); err == nil {
		_ = json.Unmarshal(js, &o)
	}
	return o
}

// newParsed starts the record of the object at document index of file.
func (l *loader) newParsed(file string, index int, obj object) *parsed {
	ns := obj.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	return &parsed{
		status: ObjectStatus{
			APIVersion: obj.APIVersion, Kind: obj.Kind, Namespace: ns, Name: obj.Metadata.Name,
			File: file, Document: index,
		},
		annotations: obj.Metadata.Annotations,
		labels:      obj.Metadata.Labels,
	}
}

func (l *loader) add(p *parsed) { l.objects = append(l.objects, p) }

// object parses one object (a document or a List item).
func (l *loader) object(file string, index int, js []byte) {
	var obj object
	if err := json.Unmarshal(js, &obj); err != nil {
		p := l.newParsed(file, index, lenientObject(js))
		p.fail("%s", typeError("", err))
		l.add(p)
		return
	}
	p := l.newParsed(file, index, obj)
	l.add(p)
	if obj.Kind == "" || obj.APIVersion == "" {
		if obj.Kind == "" {
			p.fail("kind: required")
		}
		if obj.APIVersion == "" {
			p.fail("apiVersion: required")
		}
		return
	}
	group, version := splitAPIVersion(obj.APIVersion)
	k, runs := kinds[obj.Kind]
	if !runs || (k.group != group && !knativeGroup(group)) {
		for known, ki := range kinds {
			if strings.EqualFold(known, obj.Kind) && ki.group == group && known != obj.Kind {
				p.fail("kind %q: kinds are case-sensitive; did you mean %s?", obj.Kind, known)
				return
			}
		}
		p.skip(obj)
		return
	}
	switch {
	case k.group == group && version == k.version:
	case k.group == group && contains(k.older, version):
		p.status.Reason = fmt.Sprintf("apiVersion %s is an older Knative version; read as %s, whose fields Sluice reads are the same", obj.APIVersion, k.apiVersion())
	case differingVersion(obj.APIVersion+" "+obj.Kind) != "":
		p.fail("apiVersion %q of %s was removed from Knative and its schema differs (%s); rewrite it as %s",
			obj.APIVersion, obj.Kind, differingVersion(obj.APIVersion+" "+obj.Kind), k.apiVersion())
		return
	default:
		p.fail("apiVersion %q is not supported for %s; use %s", obj.APIVersion, obj.Kind, k.apiVersion())
		return
	}
	var raw map[string]any
	_ = json.Unmarshal(js, &raw)
	for _, key := range sortedKeys(raw) {
		switch key {
		case "apiVersion", "kind", "metadata", "spec", "status":
		case "data", "binaryData", "immutable":
			if obj.Kind != kindConfigMap {
				p.fail("%s: unknown field", key)
			}
		default:
			p.fail("%s: unknown field", key)
		}
	}
	switch {
	case obj.Metadata.Name == "":
		p.fail("metadata.name: required")
	case dnsSubdomain(obj.Metadata.Name, obj.Kind == kindConfigMap) != "":
		p.fail("metadata.name: %q %s", obj.Metadata.Name, dnsSubdomain(obj.Metadata.Name, obj.Kind == kindConfigMap))
	}
	if msg := dnsLabel(p.status.Namespace); msg != "" {
		p.fail("metadata.namespace: %q %s", p.status.Namespace, msg)
	}
	if obj.Metadata.Name != "" {
		key := p.key()
		if first, dup := l.seen[key]; dup {
			p.fail("defined twice (first in %s document %d)", first.status.File, first.status.Document)
			p.duplicate = true
			return
		}
		l.seen[key] = p
	}
	if obj.Kind == kindConfigMap {
		p.configMap(obj)
		return
	}
	spec := newSpec(k.spec)
	if len(obj.Spec) > 0 && !bytes.Equal(obj.Spec, []byte("null")) {
		var rawSpec any
		_ = json.Unmarshal(obj.Spec, &rawSpec)
		shape := map[string]bool{} // paths checkFields found the wrong shape at
		checkFields("spec", rawSpec, k.spec, func(path, reason string) {
			p.fail("%s: %s", path, reason)
			shape[path] = true
		})
		// encoding/json reports the first type error and still decodes the rest, so the
		// other checks below run too.
		if err := json.Unmarshal(obj.Spec, spec); err != nil {
			var te *json.UnmarshalTypeError
			if !asTypeError(err, &te) || !shape[join("spec", te.Field)] {
				p.fail("%s", typeError("spec", err))
			}
		}
	}
	p.spec(obj, spec)
}

// knativeGroup reports whether group is one of Knative Eventing's.
func knativeGroup(group string) bool {
	switch group {
	case groupEventing, groupMessaging, groupFlows, groupSources:
		return true
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// typeError rewrites encoding/json's type errors with the field path.
func typeError(prefix string, err error) string {
	var te *json.UnmarshalTypeError
	if ok := asTypeError(err, &te); ok {
		p := te.Field
		if prefix != "" {
			p = join(prefix, p)
		}
		return fmt.Sprintf("%s: got a JSON %s, want %s", p, te.Value, friendlyType(te.Type.String()))
	}
	if prefix != "" {
		return prefix + ": " + err.Error()
	}
	return err.Error()
}

// friendlyType names a Go type the way a YAML author thinks of it.
func friendlyType(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "config."), strings.HasPrefix(t, "*config."), strings.HasPrefix(t, "filter."):
		return "an object"
	case t == "string":
		return "a string"
	case t == "int", t == "*int":
		return "an integer"
	}
	return t
}

// dnsLabel checks a Kubernetes namespace (RFC 1123 label) and says what is wrong, or "".
func dnsLabel(s string) string {
	if len(s) > 63 {
		return "is longer than 63 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return "is not a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit"
		}
	}
	return ""
}

// dnsSubdomain checks an object name: a DNS label (Knative's objects become Services
// and topics named after them), or for a ConfigMap an RFC 1123 subdomain ('.' allowed,
// up to 253 characters).
func dnsSubdomain(s string, dots bool) string {
	if !dots {
		return dnsLabel(s)
	}
	if len(s) > 253 {
		return "is longer than 253 characters"
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || dnsLabel(part) != "" {
			return "is not a DNS subdomain: lower-case letters, digits, '-' and '.'"
		}
	}
	return ""
}
