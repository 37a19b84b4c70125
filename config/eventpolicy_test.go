package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/internal/tlsfiles/tlstest"
)

// loadString reads the configuration in yaml.
func loadString(t *testing.T, yaml string) *Config {
	t.Helper()
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Read([]string{f})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCorpusEventPolicy reads the EventPolicies of Knative's authorization docs: refs in
// spec.from become the subjects Knative gives the sources' OIDC service accounts, a sub
// ending in * is a prefix, spec.to keeps its ref and its selector.
func TestCorpusEventPolicy(t *testing.T) {
	cfg := readCorpus(t, "eventpolicy")
	if err := cfg.Err(); err != nil {
		t.Fatal(err)
	}
	got := map[string]EventPolicy{}
	for _, p := range cfg.EventPolicies {
		got[p.Key()] = p
	}
	p := got["default/my-event-policy"]
	wantFrom := []PolicySubject{
		{Subject: "system:serviceaccount:another-namespace:my-source-oidc-sources.knative.dev-pingsource"},
		{Subject: "system:serviceaccount:default:trusted-app"},
		{Subject: "system:serviceaccount:default:other-", Wildcard: true},
	}
	if !reflect.DeepEqual(p.From, wantFrom) {
		t.Errorf("my-event-policy from: %+v\nwant %+v", p.From, wantFrom)
	}
	wantTo := []PolicyTarget{{Kind: "Broker", Name: "my-broker"}, {Kind: "Broker", MatchLabels: map[string]string{"app": "special-app"}}}
	if !reflect.DeepEqual(p.To, wantTo) {
		t.Errorf("my-event-policy to: %+v\nwant %+v", p.To, wantTo)
	}
	special := Broker{Namespace: "default", Name: "x", Kind: "Broker", Labels: map[string]string{"app": "special-app", "tier": "1"}}
	if !p.To[1].Selects(special) || p.To[0].Selects(special) || p.To[1].Selects(Broker{Kind: "Broker", Name: "y"}) {
		t.Error("selector / ref matching is wrong")
	}
	if p.To[1].Selects(Broker{Kind: "InMemoryChannel", Name: "x", Labels: special.Labels}) {
		t.Error("a Broker selector selected a channel")
	}
	ep := got["namespace-1/event-policy"]
	if len(ep.From) != 1 || ep.From[0].Subject != "system:serviceaccount:namespace-2:pingsource-2-oidc-sources.knative.dev-pingsource" {
		t.Errorf("event-policy from: %+v", ep.From)
	}
}

func TestEventPolicyInvalid(t *testing.T) {
	for _, tt := range []struct{ spec, want string }{
		{"{to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}}]}", "spec.from: required"},
		{"{from: [{sub: a, ref: {apiVersion: v1, kind: X, name: y}}]}", "spec.from[0]: give one of ref or sub"},
		{"{from: [{sub: 'a*b'}]}", "a wildcard is a single * at the end"},
		{"{to: [{ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: s}}], from: [{sub: a}]}", `spec.to[0].ref.kind: "Service"`},
		{"{to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b, namespace: other}}], from: [{sub: a}]}", "applies to its own namespace"},
		{"{to: [{selector: {matchExpressions: [{key: a, operator: In, values: [b]}]}}], from: [{sub: a}]}", "matchExpressions: supported by Knative, not by Sluice"},
		{"{from: [{sub: a}], filters: [{exact: {type: x}}, {cesql: 'type IN ('}]}", "spec.filters[1].cesql"},
	} {
		cfg := loadString(t, "apiVersion: eventing.knative.dev/v1alpha1\nkind: EventPolicy\nmetadata: {name: p}\nspec: "+tt.spec+"\n")
		o := cfg.Objects[0]
		if o.Ready || !strings.Contains(o.Reason, tt.want) {
			t.Errorf("%s: ready %v, reason %q; want %q", tt.spec, o.Ready, o.Reason, tt.want)
		}
	}
}

// TestDestinationCACertsAndAudience: a subscriber's and a dead-letter sink's CACerts
// and audience reach the Trigger; on a reply they are refused, naming the field.
func TestDestinationCACertsAndAudience(t *testing.T) {
	pemCert := strings.TrimSpace(string(tlstest.NewCA(t, "subscriber-ca").PEM))
	indented := "      " + strings.ReplaceAll(pemCert, "\n", "\n      ")
	cfg := loadString(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t}
spec:
  broker: b
  subscriber:
    uri: https://sub.example/
    audience: sub-aud
    CACerts: |
`+indented+`
  delivery:
    deadLetterSink:
      uri: https://dls.example/
      audience: dls-aud
`)
	if err := cfg.Err(); err != nil {
		t.Fatal(err)
	}
	tr := cfg.Brokers[0].Triggers[0]
	if !strings.Contains(tr.SubscriberCACerts, "BEGIN CERTIFICATE") || tr.SubscriberAudience != "sub-aud" || tr.Delivery.DeadLetterSinkAudience != "dls-aud" {
		t.Errorf("trigger: %+v", tr)
	}
	cfg = loadString(t, `apiVersion: messaging.knative.dev/v1
kind: InMemoryChannel
metadata: {name: c}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: s}
spec:
  channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: c}
  subscriber: {uri: "https://a/", audience: a}
  reply: {uri: "https://r/", audience: r}
`)
	if o := cfg.Objects[1]; o.Ready || !strings.Contains(o.Reason, "spec.reply: CACerts and audience: supported by Knative, not by Sluice here") {
		t.Errorf("audience on a reply: %+v", o)
	}
}

// TestInvalidEventPolicyFailsClosed: an EventPolicy that is not ready is kept in
// InvalidEventPolicies with its reason, naming what it would have governed (its spec.to,
// or nothing — its whole namespace — when spec.to or the object itself is at fault), so
// that the authorizer denies there instead of applying the default mode; on reload the
// last good version still stands beside the invalid one.
func TestInvalidEventPolicyFailsClosed(t *testing.T) {
	const brokers = "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: ns}\n---\n" +
		"apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: c, namespace: ns}\n---\n"
	policy := func(apiVersion, spec string) string {
		return "apiVersion: " + apiVersion + "\nkind: EventPolicy\nmetadata: {name: p, namespace: ns}\nspec: " + spec + "\n"
	}
	toB := "[{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}}]"
	for _, tt := range []struct {
		name   string
		policy string
		to     []PolicyTarget // nil: the whole namespace
		reason string
	}{
		{"a bad spec.from", policy("eventing.knative.dev/v1alpha1", "{to: "+toB+", from: [{sub: 'a*b'}]}"),
			[]PolicyTarget{{Kind: "Broker", Name: "b"}}, "a wildcard is a single * at the end"},
		{"a bad filter", policy("eventing.knative.dev/v1alpha1", "{to: "+toB+", from: [{sub: a}], filters: [{cesql: 'type IN ('}]}"),
			[]PolicyTarget{{Kind: "Broker", Name: "b"}}, "spec.filters[0].cesql"},
		{"a bad spec.to", policy("eventing.knative.dev/v1alpha1", "{to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Brokr, name: b}}], from: [{sub: a}]}"),
			nil, `spec.to[0].ref.kind: "Brokr"`},
		{"spec.to not a list", policy("eventing.knative.dev/v1alpha1", "{to: {ref: {kind: Broker, name: b}}, from: [{sub: a}]}"),
			nil, "spec.to: must be a list"},
		{"an unknown field", policy("eventing.knative.dev/v1alpha1", "{to: "+toB+", from: [{sub: a}], form: [{sub: b}]}"),
			[]PolicyTarget{{Kind: "Broker", Name: "b"}}, "spec.form: unknown field"},
		{"a wrong apiVersion", policy("eventing.knative.dev/v1", "{to: "+toB+", from: [{sub: a}]}"),
			nil, `apiVersion "eventing.knative.dev/v1" is not supported for EventPolicy`},
		{"no name", "apiVersion: eventing.knative.dev/v1alpha1\nkind: EventPolicy\nmetadata: {namespace: ns}\nspec: {to: " + toB + ", from: [{sub: a}]}\n",
			[]PolicyTarget{{Kind: "Broker", Name: "b"}}, "metadata.name: required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := loadString(t, brokers+tt.policy)
			if len(cfg.Brokers) != 2 || len(cfg.EventPolicies) != 0 || len(cfg.InvalidEventPolicies) != 1 {
				t.Fatalf("brokers %d, policies %+v, invalid %+v", len(cfg.Brokers), cfg.EventPolicies, cfg.InvalidEventPolicies)
			}
			p := cfg.InvalidEventPolicies[0]
			if p.Namespace != "ns" || !strings.Contains(p.Invalid, tt.reason) || !reflect.DeepEqual(p.To, tt.to) {
				t.Errorf("invalid policy %+v; want namespace ns, to %+v, reason %q", p, tt.to, tt.reason)
			}
			if o := cfg.Objects[2]; o.Ready || !strings.Contains(o.Reason, "lets no one in") {
				t.Errorf("status %+v; want not ready, saying it lets no one in", o)
			}
		})
	}

	// A reload: the last good version runs, and the invalid one stands beside it.
	dir := t.TempDir()
	f := filepath.Join(dir, "c.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(brokers + policy("eventing.knative.dev/v1alpha1", "{to: "+toB+", from: [{sub: alice}]}"))
	good, err := Read([]string{f})
	if err != nil || len(good.EventPolicies) != 1 || len(good.InvalidEventPolicies) != 0 {
		t.Fatalf("%v %+v", err, good)
	}
	write(brokers + policy("eventing.knative.dev/v1alpha1", "{to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: c}}], from: [{sub: 'bob*x'}]}"))
	next, err := Read([]string{f}, WithPrevious(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(next.EventPolicies) != 1 || next.EventPolicies[0].From[0].Subject != "alice" || next.EventPolicies[0].To[0].Name != "b" {
		t.Errorf("last good version: %+v", next.EventPolicies)
	}
	if len(next.InvalidEventPolicies) != 1 || next.InvalidEventPolicies[0].To[0].Name != "c" {
		t.Errorf("invalid version: %+v", next.InvalidEventPolicies)
	}
	// Valid again: no invalid policy is left.
	write(brokers + policy("eventing.knative.dev/v1alpha1", "{to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: c}}], from: [{sub: bob}]}"))
	fixed, err := Read([]string{f}, WithPrevious(next))
	if err != nil || len(fixed.EventPolicies) != 1 || fixed.EventPolicies[0].To[0].Name != "c" || len(fixed.InvalidEventPolicies) != 0 {
		t.Errorf("fixed: %v %+v %+v", err, fixed.EventPolicies, fixed.InvalidEventPolicies)
	}
}
