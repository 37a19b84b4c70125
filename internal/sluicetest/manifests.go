package sluicetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Trigger is one trigger of a BrokerYAML manifest.
type Trigger struct {
	Name string
	Type string // the type filter; "" matches every event
	URI  string // the subscriber
}

// BrokerYAML returns the manifests of broker default in namespace ns, with delivery (a
// YAML flow mapping such as "{retry: 3}"; "" for none) as its delivery spec, and the
// triggers on it.
func BrokerYAML(ns, delivery string, triggers ...Trigger) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default, namespace: %s}\n", ns)
	if delivery != "" {
		b.WriteString("spec:\n  delivery: " + delivery + "\n")
	}
	for _, tr := range triggers {
		fmt.Fprintf(&b, "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: %s, namespace: %s}\nspec:\n  broker: default\n", tr.Name, ns)
		if tr.Type != "" {
			fmt.Fprintf(&b, "  filter: {attributes: {type: %s}}\n", tr.Type)
		}
		fmt.Fprintf(&b, "  subscriber: {uri: %q}\n", tr.URI)
	}
	return b.String()
}

// WriteConfig writes yaml to sluice.yaml in a directory removed when t ends, and
// returns its path.
func WriteConfig(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
