package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/template"
	"text/template/parse"
)

// Knative's config-kreference-mapping: the URL of a ref to a kind named in it.
const (
	cmKReferenceMapping = "config-kreference-mapping"
	mappingWhere        = "ConfigMap " + systemNamespace + "/" + cmKReferenceMapping
)

// refMapping is config-kreference-mapping read: a URL template per kind, keyed
// "Kind.version.group" ("Kind.version" for a core kind), as Knative keys it.
type refMapping struct {
	templates map[string]*template.Template
	invalid   map[string]string // key → why its entry is not used
}

// mappingData is what a config-kreference-mapping template sees: Knative's fields. A
// ref has no UID outside the cluster: .UID is empty.
type mappingData struct {
	Name, Namespace, UID, SystemNamespace string
}

// mappingKey is the key a ref of apiVersion and kind looks up.
func mappingKey(apiVersion, kind string) string {
	group, version := splitAPIVersion(apiVersion)
	if group == "" {
		return kind + "." + version
	}
	return kind + "." + version + "." + group
}

// readMapping reads config-kreference-mapping's data; errs names each entry that is not
// used, by its data key. Knative's "_example" key is ignored.
func readMapping(data map[string]string) (m refMapping, errs []string) {
	m = refMapping{templates: map[string]*template.Template{}, invalid: map[string]string{}}
	for _, key := range sortedKeys(data) {
		if key == "_example" {
			continue
		}
		why := ""
		parts := strings.SplitN(key, ".", 3)
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] == "") {
			why = "the key is not <Kind>.<version>.<group> (or <Kind>.<version> for a core kind)"
		} else if t, err := parseMappingTemplate(key, data[key]); err != nil {
			why = err.Error()
		} else {
			m.templates[key] = t
			continue
		}
		m.invalid[key] = why
		errs = append(errs, fmt.Sprintf("data.%s: %s", key, why))
	}
	return m, errs
}

// parseMappingTemplate parses one template and renders a sample, so that a template
// naming a field that does not exist, or rendering no http or https URL, fails now. Only
// text, actions, if and with are accepted: no range, no template calls, whose work is
// not bounded by the size of the template.
func parseMappingTemplate(key, text string) (*template.Template, error) {
	t, err := template.New(key).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("a template may not define templates")
	}
	if err := boundedTree(t.Root); err != nil {
		return nil, err
	}
	u, err := renderURL(t, mappingData{Name: "n", Namespace: "ns", SystemNamespace: systemNamespace})
	if err != nil {
		return nil, err
	}
	if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("renders %q, not an absolute http or https URL", u)
	}
	return t, nil
}

// boundedTree refuses the nodes whose work is not bounded by the template's size.
func boundedTree(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := boundedTree(c); err != nil {
				return err
			}
		}
	case *parse.IfNode:
		return errors.Join(boundedTree(n.List), boundedTree(n.ElseList))
	case *parse.WithNode:
		return errors.Join(boundedTree(n.List), boundedTree(n.ElseList))
	case *parse.TextNode, *parse.ActionNode, *parse.CommentNode:
	default:
		return fmt.Errorf("%q: only text, actions, if and with are accepted", n.String())
	}
	return nil
}

// renderURL executes t with data, its output bounded by MaxRefURLBytes.
func renderURL(t *template.Template, data any) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&limitedWriter{w: &b, n: MaxRefURLBytes}, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// resolve returns the URL of ref (its namespace set) when a template of the mapping
// names its kind; an error when the entry that names it is invalid.
func (m refMapping) resolve(ref kref) (string, bool, error) {
	key := mappingKey(ref.APIVersion, ref.Kind)
	if why, bad := m.invalid[key]; bad {
		return "", false, fmt.Errorf("%s %s/%s: the entry data.%s of %s is invalid: %s", ref.Kind, ref.Namespace, ref.Name, key, mappingWhere, why)
	}
	t, ok := m.templates[key]
	if !ok {
		return "", false, nil
	}
	u, err := renderURL(t, mappingData{Name: ref.Name, Namespace: ref.Namespace, SystemNamespace: systemNamespace})
	if err != nil {
		return "", false, fmt.Errorf("%s data.%s: %w", mappingWhere, key, err)
	}
	return u, true, nil
}

// limitedWriter fails a write past n bytes: text/template stops at the first failed
// write.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if len(p) > l.n {
		return 0, fmt.Errorf("renders more than %d bytes (config.MaxRefURLBytes)", MaxRefURLBytes)
	}
	l.n -= len(p)
	return l.w.Write(p)
}
