package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/filter"
)

// Load reads the configuration at path: one YAML file, or every *.yaml and *.yml file of
// a directory (not its subdirectories, not hidden files), in name order. It returns every
// problem found, joined with errors.Join, each naming the file, the object and the field.
func Load(path string) (*Config, error) {
	files, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return load(files)
}

// fileData is one file's name and content.
type fileData struct {
	name string
	data []byte
}

// readFiles lists and reads the configuration files at path.
func readFiles(path string) ([]fileData, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	names := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		names = names[:0]
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
	}
	files := make([]fileData, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		files = append(files, fileData{n, b})
	}
	return files, nil
}

// load parses and resolves files.
func load(files []fileData) (*Config, error) {
	l := &loader{entries: map[string]*brokerEntry{}}
	cfg := &Config{}
	for _, f := range files {
		cfg.Files = append(cfg.Files, f.name)
		for i, doc := range splitDocuments(f.data) {
			l.document(f.name, i+1, doc)
		}
	}
	l.resolve(cfg)
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return cfg, nil
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

// brokerEntry is a Broker or channel being built.
type brokerEntry struct {
	Broker
	where        string // "file: Kind ns/name"
	delivery     partialDelivery
	templateKind string // a Channel's channelTemplate kind
}

// triggerEntry is a Trigger or Subscription waiting for its broker.
type triggerEntry struct {
	Trigger
	where    string
	obj      string // "Kind ns/name", for messages
	file     string
	broker   string // key of the broker or channel
	ref      *channelRef
	delivery partialDelivery
}

type loader struct {
	errs     []error
	entries  map[string]*brokerEntry
	triggers []*triggerEntry
	seen     map[string]string // "Kind ns/name" → where first defined
}

// document parses one YAML document of file.
func (l *loader) document(file string, index int, doc []byte) {
	where := fmt.Sprintf("%s: document %d", file, index)
	fail := func(format string, args ...any) {
		l.errs = append(l.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		fail("invalid YAML: %v", err)
		return
	}
	if s := bytes.TrimSpace(js); bytes.Equal(s, []byte("null")) || len(s) == 0 {
		return // an empty document
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		fail("not a Kubernetes object (a YAML mapping with apiVersion, kind, metadata, spec)")
		return
	}
	var obj object
	if err := json.Unmarshal(js, &obj); err != nil {
		fail("%s", typeError("", err))
		return
	}
	k, ok := kinds[obj.Kind]
	if !ok {
		if obj.Kind == "" {
			fail("kind: required")
		} else {
			fail("kind %q (apiVersion %q) is not supported; Sluice reads Broker and Trigger (%s), Channel, InMemoryChannel and Subscription (%s), KafkaChannel (%s)",
				obj.Kind, obj.APIVersion, apiEventing, apiMessaging, apiMessagingBeta)
		}
		return
	}
	ns := obj.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	name := fmt.Sprintf("%s %s/%s", obj.Kind, ns, obj.Metadata.Name)
	if obj.Metadata.Name == "" {
		name = fmt.Sprintf("%s (document %d)", obj.Kind, index)
	}
	where = file + ": " + name
	if obj.APIVersion != k.apiVersion {
		fail("apiVersion %q is not supported for %s; use %s", obj.APIVersion, obj.Kind, k.apiVersion)
	}
	for _, key := range sortedKeys(raw) {
		switch key {
		case "apiVersion", "kind", "metadata", "spec", "status":
		default:
			fail("%s: unknown field", key)
		}
	}
	if obj.Metadata.Name == "" {
		fail("metadata.name: required")
	} else if msg := dnsLabel(obj.Metadata.Name); msg != "" {
		fail("metadata.name: %q %s", obj.Metadata.Name, msg)
	}
	if msg := dnsLabel(ns); msg != "" {
		fail("metadata.namespace: %q %s", ns, msg)
	}
	key := ns + "/" + obj.Metadata.Name
	if l.seen == nil {
		l.seen = map[string]string{}
	}
	if first, dup := l.seen[name]; dup && obj.Metadata.Name != "" {
		fail("defined twice (first in %s)", first)
		return
	}
	l.seen[name] = fmt.Sprintf("%s document %d", file, index)

	// The spec: no unknown fields, right types.
	spec := reflect.New(k.spec).Interface()
	if len(obj.Spec) > 0 && !bytes.Equal(obj.Spec, []byte("null")) {
		var rawSpec any
		_ = json.Unmarshal(obj.Spec, &rawSpec)
		checkFields("spec", rawSpec, k.spec, func(path, reason string) { fail("%s: %s", path, reason) })
		// encoding/json reports the first type error and still decodes the rest, so the
		// other checks below run too.
		if err := json.Unmarshal(obj.Spec, spec); err != nil {
			fail("%s", typeError("spec", err))
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				return
			}
		}
	}
	o := &objectCtx{l: l, fail: fail}
	channel := obj.Metadata.Annotations[annotationChannel]
	switch channel {
	case ChannelDefault, ChannelMemory, ChannelJetStream, ChannelKafka, ChannelKinesis:
	default:
		fail("metadata.annotations.%s: %q is not one of memory, jetstream, kafka, kinesis", annotationChannel, channel)
	}
	stream := obj.Metadata.Annotations[annotationStream]
	if stream != "" && channel != ChannelKinesis {
		fail("metadata.annotations.%s: only a broker annotated %s: %s has a Kinesis stream", annotationStream, annotationChannel, ChannelKinesis)
	}
	b := &brokerEntry{Broker: Broker{Namespace: ns, Name: obj.Metadata.Name, Kind: obj.Kind, Channel: channel, KinesisStream: stream}, where: where}
	switch s := spec.(type) {
	case *brokerSpec:
		if len(s.Config) > 0 && !bytes.Equal(s.Config, []byte("null")) {
			fail("spec.config: not supported: Sluice has no ConfigMaps; choose the channel with the %s annotation", annotationChannel)
		}
		b.delivery = o.delivery("spec.delivery", s.Delivery)
		l.addBroker(key, b, fail)
	case *channelSpec:
		if t := s.ChannelTemplate; t != nil {
			b.templateKind = t.Kind
			switch {
			case t.Kind == kindInMemory && t.APIVersion == apiMessaging:
				o.backend(b, ChannelMemory)
				o.templateSpec(t.Spec, reflect.TypeFor[struct{}](), nil)
			case t.Kind == kindKafkaChannel && t.APIVersion == apiMessagingBeta:
				o.backend(b, ChannelKafka)
				var ks kafkaTopicSpec
				o.templateSpec(t.Spec, reflect.TypeFor[kafkaTopicSpec](), &ks)
				b.Partitions, b.ReplicationFactor = ks.NumPartitions, ks.ReplicationFactor
			default:
				fail("spec.channelTemplate: %s %q is not supported; use %s %s or %s %s",
					t.APIVersion, t.Kind, apiMessaging, kindInMemory, apiMessagingBeta, kindKafkaChannel)
			}
		}
		b.delivery = o.delivery("spec.delivery", s.Delivery)
		o.topic(b)
		l.addBroker(key, b, fail)
	case *inMemoryChannelSpec:
		o.backend(b, ChannelMemory)
		b.delivery = o.delivery("spec.delivery", s.Delivery)
		l.addBroker(key, b, fail)
	case *kafkaChannelSpec:
		o.backend(b, ChannelKafka)
		b.Partitions, b.ReplicationFactor = s.NumPartitions, s.ReplicationFactor
		o.topic(b)
		b.delivery = o.delivery("spec.delivery", s.Delivery)
		l.addBroker(key, b, fail)
	case *triggerSpec:
		if channel != "" {
			fail("metadata.annotations.%s: only for Brokers and channels", annotationChannel)
		}
		t := &triggerEntry{Trigger: Trigger{Namespace: ns, Name: obj.Metadata.Name, Kind: kindTrigger, Source: file}, where: where, file: file, obj: name}
		switch s.Broker {
		case "":
			fail("spec.broker: required")
		default:
			t.broker = ns + "/" + s.Broker
		}
		if s.Filter != nil {
			t.Attributes = s.Filter.Attributes
		}
		t.Filters = s.Filters
		f, err := filter.Compile(t.Attributes, t.Filters)
		if err != nil {
			for _, e := range unjoin(err) {
				fail("spec.%v", e)
			}
		}
		t.Filter = f
		t.Subscriber = o.uri("spec.subscriber", s.Subscriber, true)
		t.delivery = o.delivery("spec.delivery", s.Delivery)
		switch v := obj.Metadata.Annotations[annotationOrdering]; v {
		case "", "unordered":
		case "ordered":
			t.Ordered = true
		default:
			fail("metadata.annotations.%s: %q is not ordered or unordered", annotationOrdering, v)
		}
		l.triggers = append(l.triggers, t)
	case *subscriptionSpec:
		if channel != "" {
			fail("metadata.annotations.%s: only for Brokers and channels", annotationChannel)
		}
		t := &triggerEntry{Trigger: Trigger{Namespace: ns, Name: obj.Metadata.Name, Kind: kindSubscription, Filter: filter.MatchAll, Source: file},
			where: where, file: file, obj: name, ref: s.Channel}
		if s.Channel == nil || s.Channel.Name == "" {
			fail("spec.channel.name: required")
		} else {
			t.broker = ns + "/" + s.Channel.Name
		}
		t.Subscriber = o.uri("spec.subscriber", s.Subscriber, true)
		t.Reply = o.uri("spec.reply", s.Reply, false)
		t.delivery = o.delivery("spec.delivery", s.Delivery)
		l.triggers = append(l.triggers, t)
	}
}

func (l *loader) addBroker(key string, b *brokerEntry, fail func(string, ...any)) {
	if b.Name == "" {
		return
	}
	if other, ok := l.entries[key]; ok {
		fail("same namespace and name as %s (%s): both would be addressed at /%s", other.Kind, other.where, key)
		return
	}
	l.entries[key] = b
}

// resolve attaches triggers to their brokers, resolves delivery and sorts.
func (l *loader) resolve(cfg *Config) {
	for _, t := range l.triggers {
		if t.broker == "" {
			continue
		}
		fail := func(format string, args ...any) {
			l.errs = append(l.errs, fmt.Errorf("%s: %s", t.where, fmt.Sprintf(format, args...)))
		}
		b, ok := l.entries[t.broker]
		switch {
		case t.Kind == kindTrigger && !ok:
			fail("spec.broker: no Broker %s in the configuration", t.broker)
			continue
		case t.Kind == kindTrigger && b.Kind != kindBroker:
			fail("spec.broker: %s is a %s, not a Broker; use a Subscription", t.broker, b.Kind)
			continue
		case t.Kind == kindSubscription && !ok:
			fail("spec.channel: no %s %s in the configuration", t.ref.Kind, t.broker)
			continue
		case t.Kind == kindSubscription:
			ref := t.ref
			k, known := kinds[ref.Kind]
			switch {
			case !known || ref.Kind == kindBroker || ref.Kind == kindTrigger || ref.Kind == kindSubscription:
				fail("spec.channel.kind: %q is not a channel kind (Channel, InMemoryChannel, KafkaChannel)", ref.Kind)
				continue
			case ref.APIVersion != k.apiVersion:
				fail("spec.channel.apiVersion: %q is not supported for %s; use %s", ref.APIVersion, ref.Kind, k.apiVersion)
				continue
			case b.Kind == kindBroker:
				fail("spec.channel: %s is a Broker, not a channel; use a Trigger", t.broker)
				continue
			case ref.Kind != b.Kind && !(b.Kind == kindChannel && b.templateKind == ref.Kind):
				fail("spec.channel: %s is a %s, not a %s", t.broker, b.Kind, ref.Kind)
				continue
			}
		}
		t.Delivery = t.delivery.over(b.delivery).resolve()
		b.Triggers = append(b.Triggers, t.Trigger)
	}
	for _, b := range l.entries {
		sort.Slice(b.Triggers, func(i, j int) bool { return b.Triggers[i].Key() < b.Triggers[j].Key() })
		cfg.Brokers = append(cfg.Brokers, b.Broker)
	}
	sort.Slice(cfg.Brokers, func(i, j int) bool { return cfg.Brokers[i].Key() < cfg.Brokers[j].Key() })
}

// objectCtx validates the parts of one object, reporting through fail.
type objectCtx struct {
	l    *loader
	fail func(format string, args ...any)
}

// backend sets the backend a kind implies, rejecting a conflicting annotation.
func (o *objectCtx) backend(b *brokerEntry, backend string) {
	if b.Channel != "" && b.Channel != backend {
		o.fail("metadata.annotations.%s: %q conflicts with the %s backend of this channel", annotationChannel, b.Channel, backend)
	}
	b.Channel = backend
}

// topic checks a KafkaChannel's topic settings.
func (o *objectCtx) topic(b *brokerEntry) {
	if b.Partitions < 0 {
		o.fail("spec.numPartitions: must not be negative")
	}
	if b.ReplicationFactor < 0 {
		o.fail("spec.replicationFactor: must not be negative")
	}
}

// templateSpec checks a channelTemplate's spec against t and decodes it into v.
func (o *objectCtx) templateSpec(raw json.RawMessage, t reflect.Type, v any) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return
	}
	var generic any
	_ = json.Unmarshal(raw, &generic)
	checkFields("spec.channelTemplate.spec", generic, t, func(path, reason string) { o.fail("%s: %s", path, reason) })
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			o.fail("%s", typeError("spec.channelTemplate.spec", err))
		}
	}
}

// uri validates a destination: a uri that is an absolute http or https URL (required
// or not), and no ref.
func (o *objectCtx) uri(path string, d *destination, required bool) string {
	if d != nil && len(d.Ref) > 0 && !bytes.Equal(d.Ref, []byte("null")) {
		o.fail("%s.ref: not supported outside Kubernetes; use %s.uri", path, path)
		return ""
	}
	if d == nil || d.URI == "" {
		if required {
			o.fail("%s.uri: required", path)
		}
		return ""
	}
	u, err := url.Parse(d.URI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		o.fail("%s.uri: %q is not an absolute http or https URL", path, d.URI)
		return ""
	}
	return d.URI
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// typeError rewrites encoding/json's type errors with the field path.
func typeError(prefix string, err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		p := te.Field
		if prefix != "" {
			p = join(prefix, p)
		}
		return fmt.Sprintf("%s: got a JSON %s, want %s", p, te.Value, te.Type)
	}
	if prefix != "" {
		return prefix + ": " + err.Error()
	}
	return err.Error()
}

// dnsLabel checks a Kubernetes name (RFC 1123 label) and says what is wrong, or "".
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
