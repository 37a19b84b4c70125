package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// hangAfter is how long one read may take before the fuzzer calls it a hang: generous,
// since a read of a small input takes well under a millisecond.
const hangAfter = 5 * time.Second

// FuzzRead feeds arbitrary YAML through the loader: it must never panic, give every
// object it found a status, answer the same for the same bytes, and Load (the strict
// path) must succeed exactly when Read reports no error.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"testdata/demo.yaml", "testdata/channels.yaml", "testdata/knative-trigger.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: ns}\nspec:\n  broker: b\n  filters: [{cesql: \"type = 'x'\"}]\n  subscriber: {uri: http://127.0.0.1:1/}\n"))
	f.Add([]byte("---\n---\nkind: List\nitems: [{kind: Broker}]\n"))
	f.Add([]byte("apiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: p}\nspec: {schedule: '@every 1s', sink: {uri: http://x/}}\n"))
	f.Add([]byte("{a: [1, {b: *c}]}"))
	// Aliases: a value used many times, nested laughs, an alias to itself, a merge key,
	// an empty file and one of white space.
	f.Add([]byte(aliasBomb(1000, 100)))
	f.Add([]byte("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: &m {name: b}\nspec: {delivery: &d {retry: 2}}\n---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {<<: *m, name: c}\nspec: {delivery: *d}\n"))
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: n, annotations: {sluice.dev/dedup-window: PT5M}}\n---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: n, annotations: {sluice.dev/paused: \"true\"}}\nspec: {broker: b, subscriber: {uri: http://x/}}\n"))
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, annotations: {sluice.dev/dedup-window: 1h30m5.5s}}\n"))
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: n}\n---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: n, annotations: {sluice.dev/max-delivery-rate: \"2.5\", sluice.dev/max-in-flight: \"3\"}}\nspec: {broker: b, subscriber: {uri: http://x/}}\n"))
	// Knative's NATS objects, the other broker classes, config-br-defaults' delivery and
	// a delivery format.
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: n, annotations: {eventing.knative.dev/broker.class: NatsJetStreamBroker, natsjetstream.eventing.knative.dev/config: '{\"stream\": {\"maxBytes\": 10, \"replicas\": 1}}'}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: natsjetstream-broker-config, namespace: n}\ndata:\n  config: |\n    clusterDefault: {stream: {maxBytes: 5}}\n    namespaceDefaults: {n: {stream: {replicas: 1}}}\n"))
	f.Add([]byte("apiVersion: messaging.knative.dev/v1alpha1\nkind: NatsJetStreamChannel\nmetadata: {name: c}\nspec: {stream: {config: {maxBytes: 100, storage: File}}, delivery: {format: json}}\n---\napiVersion: messaging.knative.dev/v1\nkind: Subscription\nmetadata: {name: s}\nspec: {channel: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatsJetStreamChannel, name: c}, subscriber: {uri: http://x/}}\n"))
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-br-defaults, namespace: knative-eventing}\ndata:\n  default-br-config: |\n    clusterDefault: {brokerClass: KafkaNamespaced, delivery: {retry: 2, backoffPolicy: linear, deadLetterSink: {uri: http://d/}}}\n---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\n"))
	// eventing-rabbitmq's objects: a RabbitmqBrokerConfig, its Broker, a Trigger's parallelism.
	f.Add([]byte("apiVersion: eventing.knative.dev/v1alpha1\nkind: RabbitmqBrokerConfig\nmetadata: {name: c, namespace: n}\nspec: {rabbitmqClusterReference: {name: r}, queueType: classic}\n---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: n, annotations: {eventing.knative.dev/broker.class: RabbitMQBroker}}\nspec: {config: {apiVersion: eventing.knative.dev/v1alpha1, kind: RabbitmqBrokerConfig, name: c}}\n---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: n, annotations: {rabbitmq.eventing.knative.dev/parallelism: \"10\"}}\nspec: {broker: b, subscriber: {uri: http://x/}}\n"))
	f.Add([]byte(""))
	f.Add([]byte(" \n\t\n"))
	st, err := newSettings(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg *Config
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			cfg, err = load([]fileData{{name: "fuzz.yaml", data: b}}, nil, st)
		}()
		select {
		case <-done:
		case <-time.After(hangAfter):
			t.Fatalf("reading %d bytes did not finish in %s", len(b), hangAfter)
		}
		if err != nil {
			// Only a document that expands past the bound is refused as a whole, naming
			// the file and the bound.
			if !strings.Contains(err.Error(), "fuzz.yaml") || !strings.Contains(err.Error(), "MaxExpandedBytes") {
				t.Fatalf("load: %v", err)
			}
			return
		}
		for _, o := range cfg.Objects {
			if !o.Ready && o.Reason == "" {
				t.Fatalf("object %+v is not ready and says nothing about why", o)
			}
		}
		again, err := load([]fileData{{name: "fuzz.yaml", data: b}}, nil, st)
		if err != nil {
			t.Fatalf("a second load of the same bytes fails: %v", err)
		}
		if errString(cfg.Err()) != errString(again.Err()) {
			t.Fatalf("two reads of the same bytes differ:\n%v\n%v", cfg.Err(), again.Err())
		}
		if len(b) > 4096 {
			return // the file round trip below costs a write; keep it for small inputs
		}
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, lerr := Load(path)
		if (lerr == nil) != (cfg.Err() == nil) {
			t.Fatalf("Load error %v, Read error %v", lerr, cfg.Err())
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzExpandedSize checks the measure that bounds alias expansion against what the
// document really expands to: the JSON that sigs.k8s.io/yaml makes of it is never more
// than six times the measure (a JSON escape is at most six bytes for one), so no
// document can slip past MaxExpandedBytes by being measured short.
func FuzzExpandedSize(f *testing.F) {
	f.Add([]byte(aliasBomb(1000, 100)))
	f.Add([]byte("a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"))
	f.Add([]byte("a: &a {k: \"\\x01\\x02\", 1: 2.5e300, t: 2001-12-14, n: ~}\nb: [*a, *a, {<<: *a, z: true}]\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := expandedSize(b, 1<<20)
		if bytes.IndexByte(b, '*') < 0 {
			if n != int64(len(b)) {
				t.Fatalf("a document without aliases measured %d, its length is %d", n, len(b))
			}
			return
		}
		if n > 1<<20 {
			return // refused: not expanded
		}
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			return
		}
		if int64(len(js)) > 6*n+16 {
			t.Fatalf("measured %d, expands to %d bytes of JSON", n, len(js))
		}
	})
}

// FuzzRefMapping feeds arbitrary keys and templates to config-kreference-mapping: it
// must never panic or hang, every entry must be either used or refused with a reason,
// and what a used entry renders for a ref is an absolute http or https URL within
// MaxRefURLBytes.
func FuzzRefMapping(f *testing.F) {
	f.Add("JobSink.v1alpha1.sinks.knative.dev", "http://job-sink.{{.SystemNamespace}}.svc.cluster.local/{{.Namespace}}/{{.Name}}")
	f.Add("JobDefinition.v1", "https://jobs.example/{{.Name}}{{.UID}}")
	f.Add("Loop.v1.example.com", "http://x/{{range 1000000000}}{{end}}")
	f.Add("Calls.v1.example.com", `{{define "a"}}x{{end}}http://x/{{template "a"}}`)
	f.Add("Wide.v1.example.com", `http://x/{{printf "%999999d" 1}}`)
	f.Add("If.v1.x", `http://x/{{if .Name}}{{.Name | urlquery}}{{else}}none{{end}}`)
	f.Add("NoVersion", "http://x/")
	f.Add("_example", "{{")
	f.Fuzz(func(t *testing.T, key, text string) {
		done := make(chan string, 1) // what is wrong, or ""
		go func() { done <- checkMapping(key, text) }()
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-time.After(hangAfter):
			t.Fatalf("key %q template %q: no answer within %v", key, text, hangAfter)
		}
	})
}

// checkMapping reads a mapping of one entry and says what is wrong with the result, or "".
func checkMapping(key, text string) string {
	m, errs := readMapping(map[string]string{key: text})
	if key == "_example" {
		return ""
	}
	_, used := m.templates[key]
	if used == (len(errs) > 0) || used == (m.invalid[key] != "") {
		return fmt.Sprintf("key %q: used %v, errors %q, invalid %q", key, used, errs, m.invalid[key])
	}
	if !used {
		return ""
	}
	parts := strings.SplitN(key, ".", 3)
	av := parts[1]
	if len(parts) == 3 {
		av = parts[2] + "/" + parts[1]
	}
	u, ok, err := m.resolve(kref{APIVersion: av, Kind: parts[0], Name: "a-name", Namespace: "a-ns"})
	if err == nil && (!ok || len(u) > MaxRefURLBytes || !(strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://"))) {
		return fmt.Sprintf("key %q template %q: %q %v", key, text, u, ok)
	}
	return ""
}

// FuzzReadDocuments reads documents as the Kubernetes mode passes them (objects from the
// API server, JSON): input split at NUL bytes into documents. No input panics, and every
// object's status names the document it came from.
func FuzzReadDocuments(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"eventing.knative.dev/v1","kind":"Broker","metadata":{"name":"b","namespace":"n","generation":1,"annotations":{"eventing.knative.dev/broker.class":"Sluice"}}}` + "\x00" +
		`{"apiVersion":"eventing.knative.dev/v1","kind":"Trigger","metadata":{"name":"t","namespace":"n"},"spec":{"broker":"b","subscriber":{"uri":"http://x/"}}}`))
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"config-br-defaults","namespace":"knative-eventing"},"data":{"default-br-config":"{clusterDefault: {brokerClass: Sluice}}"}}`))
	f.Add([]byte("{}\x00null\x00[]\x00{\"kind\":\"List\",\"apiVersion\":\"v1\",\"items\":[{}]}"))
	f.Add([]byte(`{"apiVersion":"flows.knative.dev/v1","kind":"Sequence","metadata":{"name":"s","namespace":"n"},"spec":{"channelTemplate":{"apiVersion":"messaging.knative.dev/v1","kind":"InMemoryChannel"},"steps":[{"uri":"http://a/"},{"uri":"http://b/"}]}}` + "\x00" +
		`{"apiVersion":"flows.knative.dev/v1","kind":"Parallel","metadata":{"name":"p","namespace":"n"},"spec":{"branches":[{"subscriber":{"uri":"http://x/"}},{"filter":{"uri":"http://f/"},"subscriber":{"uri":"http://y/"}}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var docs []Document
		names := map[string]bool{}
		for i, d := range bytes.Split(b, []byte{0}) {
			name := "kubernetes:doc/" + strconv.Itoa(i)
			docs = append(docs, Document{Name: name, Data: d})
			names[name] = true
		}
		cfg, err := ReadDocuments(docs)
		if err != nil {
			return
		}
		for _, o := range cfg.Objects {
			if !names[o.File] {
				t.Fatalf("object %s names document %q, not one of the input", o.Key(), o.File)
			}
			// A flow's channels: one subscription each, but a Parallel's ingress, which
			// has one per branch channel.
			for i, ch := range o.FlowChannels {
				want := 1
				if o.Kind == "Parallel" && i == 0 {
					want = len(o.FlowChannels) - 1
				}
				if ch.Name == "" || ch.Kind == "" || len(ch.Subscriptions) != want || !ch.Ready {
					t.Fatalf("%s: flow channel %d %+v: want a named, ready channel with %d subscriptions", o.Key(), i, ch, want)
				}
			}
		}
	})
}
