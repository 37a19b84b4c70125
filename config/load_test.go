package config

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/filter"
)

func mustLoad(t *testing.T, path string) *Config {
	t.Helper()
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	return cfg
}

func TestLoadDemo(t *testing.T) {
	cfg := mustLoad(t, "testdata/demo.yaml")
	if len(cfg.Brokers) != 1 {
		t.Fatalf("brokers: %+v", cfg.Brokers)
	}
	b := cfg.Brokers[0]
	if b.Key() != "demo/default" || b.Kind != "Broker" || b.Channel != "" || len(b.Triggers) != 1 {
		t.Fatalf("broker: %+v", b)
	}
	tr := b.Triggers[0]
	want := Delivery{Retry: 3, BackoffPolicy: "exponential", BackoffDelay: 200 * time.Millisecond,
		Timeout: 10 * time.Second, RetryAfterMax: 30 * time.Second, DeadLetterSink: "http://127.0.0.1:9001/"}
	if tr.Key() != "demo/perf" || tr.Subscriber != "http://127.0.0.1:9000/" || tr.Delivery != want ||
		tr.Source != "testdata/demo.yaml" || tr.Ordered || tr.Kind != "Trigger" {
		t.Errorf("trigger: %+v", tr)
	}
	if !tr.Filter.Match(&event.Event{Type: "io.triggermesh.perf.drill"}) || tr.Filter.Match(&event.Event{Type: "other"}) {
		t.Error("filter does not select type io.triggermesh.perf.drill")
	}
	if !slicesEqual(cfg.Files, []string{"testdata/demo.yaml"}) {
		t.Errorf("files %v", cfg.Files)
	}
}

func TestLoadKnativeTrigger(t *testing.T) {
	cfg := mustLoad(t, "testdata/knative-trigger.yaml")
	b := cfg.Brokers[0]
	if b.Key() != "default/default" || len(b.Triggers) != 1 {
		t.Fatalf("%+v", cfg.Brokers)
	}
	tr := b.Triggers[0]
	if tr.Key() != "default/my-service-trigger" || tr.Delivery != DefaultDelivery() {
		t.Errorf("%+v", tr)
	}
	ok := &event.Event{Type: "dev.knative.foo.bar", ID: "1", Source: "s", SpecVersion: "1.0",
		Extensions: []event.Extension{{Name: "myextension", Value: "my-extensions"}}}
	no := &event.Event{Type: "dev.knative.foo.bar", ID: "1", Source: "s", SpecVersion: "1.0",
		Extensions: []event.Extension{{Name: "myextension", Value: "other"}}}
	if !tr.Filter.Match(ok) || tr.Filter.Match(no) {
		t.Error("cesql filter not applied")
	}
}

func TestLoadChannels(t *testing.T) {
	cfg := mustLoad(t, "testdata/channels.yaml")
	got := map[string]Broker{}
	for _, b := range cfg.Brokers {
		got[b.Key()] = b
	}
	keys := []string{}
	for _, b := range cfg.Brokers {
		keys = append(keys, b.Key())
	}
	if !slicesEqual(keys, []string{"shop/audit", "shop/fast", "shop/orders", "shop/plain"}) {
		t.Fatalf("brokers %v", keys)
	}
	tests := []struct {
		key, kind, channel string
		parts, rf          string // Settings: spec.numPartitions, spec.replicationFactor
		subs               []string
	}{
		{"shop/orders", "Channel", "kafka", "6", "1", []string{"shop/billing"}},
		{"shop/fast", "InMemoryChannel", "memory", "", "", []string{"shop/cache"}},
		{"shop/audit", "KafkaChannel", "kafka", "3", "2", []string{"shop/archive"}},
		{"shop/plain", "Channel", "", "", "", nil},
	}
	for _, tt := range tests {
		b := got[tt.key]
		var subs []string
		for _, s := range b.Triggers {
			subs = append(subs, s.Key())
			if s.Kind != "Subscription" || s.Filter != filter.MatchAll {
				t.Errorf("%s: %+v", s.Key(), s)
			}
		}
		if b.Kind != tt.kind || b.Channel != tt.channel || b.Settings["spec.numPartitions"] != tt.parts || b.Settings["spec.replicationFactor"] != tt.rf || !slicesEqual(subs, tt.subs) {
			t.Errorf("%s: %+v", tt.key, b)
		}
	}
	billing := got["shop/orders"].Triggers[0]
	want := Delivery{Retry: 0, BackoffPolicy: "linear", BackoffDelay: time.Second, Timeout: 30 * time.Second, RetryAfterMax: time.Minute}
	if billing.Delivery != want || billing.Reply != "http://127.0.0.1:9000/replies" || billing.Subscriber != "http://127.0.0.1:9000/billing" {
		t.Errorf("billing: %+v", billing)
	}
	archive := got["shop/audit"].Triggers[0]
	if archive.Delivery.DeadLetterSink != "https://dls.example.com/audit" || archive.Reply != "" {
		t.Errorf("archive: %+v", archive)
	}
}

func TestLoadDirectoryAndFallback(t *testing.T) {
	cfg := mustLoad(t, "testdata/dir")
	if !slicesEqual(cfg.Files, []string{"testdata/dir/a-broker.yaml", "testdata/dir/b-triggers.yml"}) {
		t.Errorf("files %v", cfg.Files)
	}
	b := cfg.Brokers[0]
	if b.Key() != "ns1/main" || b.Channel != "jetstream" || len(b.Triggers) != 1 {
		t.Fatalf("%+v", b)
	}
	tr := b.Triggers[0]
	// Field by field: backoffDelay from the trigger, retry and timeout from the broker,
	// the rest from DefaultDelivery().
	want := Delivery{Retry: 7, BackoffPolicy: "exponential", BackoffDelay: 500 * time.Millisecond,
		Timeout: 2 * time.Second, RetryAfterMax: 30 * time.Second}
	if tr.Delivery != want || !tr.Ordered || tr.Source != "testdata/dir/b-triggers.yml" {
		t.Errorf("%+v", tr)
	}
}

func TestDefault(t *testing.T) {
	cfg := Default()
	if len(cfg.Brokers) != 1 || cfg.Brokers[0].Key() != "default/default" || cfg.Brokers[0].Channel != "" ||
		len(cfg.Brokers[0].Triggers) != 0 || cfg.Brokers[0].Kind != "Broker" {
		t.Errorf("%+v", cfg)
	}
}

func TestTriggerEqual(t *testing.T) {
	a := mustLoad(t, "testdata/demo.yaml").Brokers[0].Triggers[0]
	b := mustLoad(t, "testdata/demo.yaml").Brokers[0].Triggers[0]
	if !a.Equal(b) {
		t.Error("same trigger loaded twice is not Equal")
	}
	b.Source = "elsewhere.yaml"
	if !a.Equal(b) {
		t.Error("Source should not matter")
	}
	c := b
	c.Attributes = map[string]string{"type": "other"}
	if a.Equal(c) {
		t.Error("different filter attributes are Equal")
	}
	c = b
	c.Filters = []filter.Spec{{Prefix: map[string]string{"type": "io."}}}
	if a.Equal(c) {
		t.Error("different filters are Equal")
	}
	c = b
	c.Delivery.Retry++
	if a.Equal(c) {
		t.Error("different delivery is Equal")
	}
}

func TestLoadErrors(t *testing.T) {
	const broker = "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default, namespace: demo}\n---\n"
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"subscriber ref", broker + `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: perf, namespace: demo}
spec:
  broker: default
  subscriber:
    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: my-service}
  delivery: {retry: three, backoffPolicy: fast}
`, []string{"x.yaml: Trigger demo/perf: spec.delivery.retry: got a JSON string, want an integer",
			`x.yaml: Trigger demo/perf: spec.delivery.backoffPolicy: "fast" is not linear or exponential`}},
		{"unknown spec field", broker + `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: perf, namespace: demo}
spec: {broker: default, subscriber: {uri: "http://a/"}, filter: {attributes: {type: a}, cesql: "x"}}
`, []string{"x.yaml: Trigger demo/perf: spec.filter.cesql: unknown field"}},
		{"ping source without sink", "apiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: p}\n",
			[]string{`x.yaml: PingSource default/p: spec.sink: required: a ref or a uri`}},
		{"wrong apiVersion", "apiVersion: eventing.knative.dev/v2\nkind: Broker\nmetadata: {name: b}\n",
			[]string{`x.yaml: Broker default/b: apiVersion "eventing.knative.dev/v2" is not supported for Broker; use eventing.knative.dev/v1`}},
		{"missing kind", "metadata: {name: b}\n", []string{"x.yaml: document 1: kind: required"}},
		{"unknown top-level field", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\nspecs: {}\n",
			[]string{"x.yaml: Broker default/b: specs: unknown field"}},
		{"broker config", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\nspec: {config: {apiVersion: v1, kind: ConfigMap, name: c}}\n",
			[]string{"x.yaml: Broker default/b: spec.config: ConfigMap default/c is not in the configuration"}},
		{"kinesis stream without kinesis", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, annotations: {sluice.dev/kinesis-stream: orders}}\n",
			[]string{`x.yaml: Broker default/b: metadata.annotations.sluice.dev/kinesis-stream: only a broker annotated sluice.dev/channel: kinesis has a Kinesis stream`}},
		{"bad channel annotation", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, annotations: {sluice.dev/channel: redis}}\n",
			[]string{`x.yaml: Broker default/b: metadata.annotations.sluice.dev/channel: "redis" is not one of memory, jetstream, kafka, kinesis`}},
		{"missing name", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {namespace: a}\n",
			[]string{"x.yaml: Broker (document 1): metadata.name: required"}},
		{"bad names", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: My_Broker, namespace: -x}\n",
			[]string{`x.yaml: Broker -x/My_Broker: metadata.name: "My_Broker" is not a DNS label`, `metadata.namespace: "-x" is not a DNS label`}},
		{"unknown broker", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo}\nspec: {broker: other, subscriber: {uri: \"http://a/\"}}\n",
			[]string{"x.yaml: Trigger demo/t: spec.broker: Broker demo/other is not in the configuration"}},
		{"trigger in other namespace", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t}\nspec: {broker: default, subscriber: {uri: \"http://a/\"}}\n",
			[]string{"x.yaml: Trigger default/t: spec.broker: Broker default/default is not in the configuration"}},
		{"missing broker and subscriber", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo}\n",
			[]string{"Trigger demo/t: spec.broker: required", "Trigger demo/t: spec.subscriber: required: a ref or a uri"}},
		{"relative subscriber", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo}\nspec: {broker: default, subscriber: {uri: /path}}\n",
			[]string{`Trigger demo/t: spec.subscriber.uri: "/path" is not an absolute http or https URL`}},
		{"filters errors", broker + `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: demo}
spec:
  broker: default
  subscriber: {uri: "http://a/"}
  filters:
    - exact: {type: a}
    - any: [{prefix: {}}]
    - cesql: "type ="
    - {exact: {type: a}, suffix: {type: b}}
`, []string{"Trigger demo/t: spec.filters[1].any[0].prefix: empty", "Trigger demo/t: spec.filters[2].cesql: invalid expression",
			"spec.filters[3]: has exact, suffix"}},
		{"unknown filters field", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo}\nspec: {broker: default, subscriber: {uri: \"http://a/\"}, filters: [{all: [{sql: x}]}]}\n",
			[]string{"Trigger demo/t: spec.filters[0].all[0].sql: unknown field"}},
		{"ordering annotation", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo, annotations: {kafka.eventing.knative.dev/delivery.order: sorted}}\nspec: {broker: default, subscriber: {uri: \"http://a/\"}}\n",
			[]string{`metadata.annotations.kafka.eventing.knative.dev/delivery.order: "sorted" is not ordered or unordered`}},
		{"batch annotations", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo, annotations: {sluice.dev/delivery-batch: \"0\", sluice.dev/delivery-batch-wait: 5ms}}\nspec: {broker: default, subscriber: {uri: \"http://a/\"}}\n",
			[]string{`metadata.annotations.sluice.dev/delivery-batch: "0" is not a whole number from 1 to 1000`, "metadata.annotations.sluice.dev/delivery-batch-wait: "}},
		{"batch wait too long", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo, annotations: {sluice.dev/delivery-batch: \"10\", sluice.dev/delivery-batch-wait: PT2S}}\nspec: {broker: default, subscriber: {uri: \"http://a/\"}}\n",
			[]string{`metadata.annotations.sluice.dev/delivery-batch-wait: "PT2S": want more than 0 and at most PT1S`}},
		{"delivery errors", `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b}
spec:
  delivery:
    retry: -1
    backoffPolicy: fibonacci
    backoffDelay: 200ms
    timeout: PT0S
    retryAfterMax: P1M
    deadLetterSink: {ref: {kind: Service, name: dls}, CACerts: x}
`, []string{"Broker default/b: spec.delivery.retry: -1 is negative",
			`spec.delivery.backoffPolicy: "fibonacci" is not linear or exponential`,
			`spec.delivery.backoffDelay: "200ms" is not an ISO-8601 duration`,
			"spec.delivery.timeout: must be longer than zero",
			"spec.delivery.retryAfterMax: \"P1M\" is not an ISO-8601 duration such as PT0.2S or PT1M: years and months",
			"spec.delivery.deadLetterSink.ref.apiVersion: required",
			"spec.delivery.deadLetterSink.CACerts: no PEM certificate in it"}},
		{"wrong type", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\nspec: {delivery: {retry: three}}\n",
			[]string{"Broker default/b: spec.delivery.retry: got a JSON string, want an integer"}},
		{"broker and channel clash", broker + "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: default, namespace: demo}\n",
			[]string{"x.yaml: InMemoryChannel demo/default: same namespace and name as Broker demo/default (x.yaml): both would be addressed at /demo/default"}},
		{"defined twice", broker + broker, []string{"x.yaml: Broker demo/default: defined twice (first in x.yaml document 1)"}},
		{"channel template", "apiVersion: messaging.knative.dev/v1\nkind: Channel\nmetadata: {name: c}\nspec: {channelTemplate: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatssChannel}}\n",
			[]string{`Channel default/c: spec.channelTemplate: messaging.knative.dev/v1alpha1 "NatssChannel" is not supported`}},
		{"channel template spec field", "apiVersion: messaging.knative.dev/v1\nkind: Channel\nmetadata: {name: c}\nspec: {channelTemplate: {apiVersion: messaging.knative.dev/v1beta1, kind: KafkaChannel, spec: {retentionDuration: PT1H}}}\n",
			[]string{`Channel default/c: spec.channelTemplate.spec.retentionDuration: "PT1H": supported by Knative, not by Sluice`}},
		{"kafka channel unknown field", "apiVersion: messaging.knative.dev/v1beta1\nkind: KafkaChannel\nmetadata: {name: k}\nspec: {numPartitions: -1, subscribers: [{subscriberUri: \"http://a/\"}]}\n",
			[]string{"KafkaChannel default/k: spec.subscribers[0]: supported by Knative, not by Sluice: write a Subscription"}},
		{"kafka channel negative partitions", "apiVersion: messaging.knative.dev/v1beta1\nkind: KafkaChannel\nmetadata: {name: k}\nspec: {numPartitions: -1}\n",
			[]string{"KafkaChannel default/k: spec.numPartitions: must not be negative"}},
		{"channel annotation conflict", "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: c, annotations: {sluice.dev/channel: kafka}}\n",
			[]string{`InMemoryChannel default/c: metadata.annotations.sluice.dev/channel: "kafka" conflicts with the memory backend`}},
		{"subscription errors", "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: c}\n---\n" + `apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: s1}
spec:
  channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: nope}
  subscriber: {uri: "http://a/"}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: s2}
spec:
  channel: {apiVersion: messaging.knative.dev/v1beta1, kind: KafkaChannel, name: c}
  subscriber: {uri: "http://a/"}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: s4}
spec:
  channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: c}
  subscriber: {uri: "http://a/"}
  reply: {uri: "ftp://x/"}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: s3}
spec:
  subscriber: {ref: {kind: Service, name: x}}
`, []string{"x.yaml: Subscription default/s1: spec.channel: InMemoryChannel default/nope is not in the configuration",
			"x.yaml: Subscription default/s2: spec.channel: default/c is a InMemoryChannel, not a KafkaChannel",
			`x.yaml: Subscription default/s4: spec.reply.uri: "ftp://x/" is not an absolute http or https URL`,
			"x.yaml: Subscription default/s3: spec.channel.name: required",
			"x.yaml: Subscription default/s3: spec.subscriber.ref.apiVersion: required"}},
		{"trigger on channel", "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: c}\n---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t}\nspec: {broker: c, subscriber: {uri: \"http://a/\"}}\n",
			[]string{"Trigger default/t: spec.broker: default/c is a InMemoryChannel, not a Broker; use a Subscription"}},
		{"invalid yaml", "apiVersion: [\n", []string{"x.yaml: document 1: invalid YAML"}},
		{"not an object", "- a\n- b\n", []string{"x.yaml: document 1: not a Kubernetes object"}},
		{"document index", broker + "---\nkind: Foo\n", []string{"x.yaml: Foo (document 2): apiVersion: required"}},
		{"duplicate key", broker + "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\napiVersion: eventing.knative.dev/v1\nkind: Trigger\n",
			[]string{`x.yaml: Trigger default/b: invalid YAML`, `a key given twice; if two objects run together, separate them with a line "---"`}},
		{"filters object", broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: demo}\nspec: {broker: default, subscriber: {uri: \"http://a/\"}, filters: {exact: {type: a}}}\n",
			[]string{"Trigger demo/t: spec.filters: must be a list"}},
		{"unsupported class", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, annotations: {eventing.knative.dev/broker.class: ExampleBroker}}\n",
			[]string{`Broker default/b: metadata.annotations.eventing.knative.dev/broker.class: "ExampleBroker" is not a broker class Sluice runs`}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "x.yaml")
			if err := os.WriteFile(p, []byte(tt.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(p)
			if err == nil {
				t.Fatalf("no error; config %+v", cfg)
			}
			msg := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain\n%s", msg, w)
				}
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	if _, err := Load("testdata/nope.yaml"); err == nil {
		t.Error("no error for a missing file")
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml files") {
		t.Errorf("empty directory: %v", err)
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAPIVersions: one rule for every version. The current version is read; an older
// version whose fields Sluice reads are the current one's is read as it, with a note on
// the ready object; a removed version whose schema differs is refused, naming what
// differs and the version to use; any other version is refused.
func TestAPIVersions(t *testing.T) {
	specs := map[string]string{
		kindBroker:       "{}",
		kindTrigger:      "{broker: b, subscriber: {uri: \"http://a/\"}}",
		kindChannel:      "{}",
		kindInMemory:     "{}",
		kindKafkaChannel: "{}",
		kindSubscription: "{channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: imc}, subscriber: {uri: \"http://a/\"}}",
		kindSequence:     "{steps: [{uri: \"http://a/\"}]}",
		kindParallel:     "{branches: [{subscriber: {uri: \"http://a/\"}}]}",
		kindPingSource:   "{sink: {uri: \"http://a/\"}}",
	}
	base := "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\n---\n" +
		"apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: imc}\n"
	for _, tt := range []struct {
		apiVersion, kind string
		ready            bool
		reason           string // "" for none
	}{
		{"eventing.knative.dev/v1", kindBroker, true, ""},
		{"eventing.knative.dev/v1beta1", kindBroker, true, "apiVersion eventing.knative.dev/v1beta1 is an older Knative version; read as eventing.knative.dev/v1, whose fields Sluice reads are the same"},
		{"eventing.knative.dev/v1beta1", kindTrigger, true, "read as eventing.knative.dev/v1"},
		{"messaging.knative.dev/v1beta1", kindChannel, true, "read as messaging.knative.dev/v1"},
		{"messaging.knative.dev/v1beta1", kindInMemory, true, "read as messaging.knative.dev/v1"},
		{"messaging.knative.dev/v1beta1", kindSubscription, true, "read as messaging.knative.dev/v1"},
		{"messaging.knative.dev/v1beta1", kindKafkaChannel, true, ""},
		{"flows.knative.dev/v1beta1", kindSequence, true, "read as flows.knative.dev/v1"},
		{"flows.knative.dev/v1beta1", kindParallel, true, "read as flows.knative.dev/v1"},
		{"sources.knative.dev/v1beta2", kindPingSource, true, "read as sources.knative.dev/v1"},
		{"eventing.knative.dev/v1alpha1", kindBroker, false, `apiVersion "eventing.knative.dev/v1alpha1" of Broker was removed from Knative and its schema differs (spec.channelTemplateSpec became spec.config, a ConfigMap holding the channel template); rewrite it as eventing.knative.dev/v1`},
		{"eventing.knative.dev/v1alpha1", kindTrigger, false, "(spec.filter.sourceAndType became spec.filter.attributes); rewrite it as eventing.knative.dev/v1"},
		{"messaging.knative.dev/v1alpha1", kindChannel, false, "(spec.subscribable became spec.subscribers); rewrite it as messaging.knative.dev/v1"},
		{"messaging.knative.dev/v1alpha1", kindInMemory, false, "rewrite it as messaging.knative.dev/v1"},
		{"messaging.knative.dev/v1alpha1", kindKafkaChannel, false, "rewrite it as messaging.knative.dev/v1beta1"},
		{"messaging.knative.dev/v1alpha1", kindSubscription, false, "rewrite it as messaging.knative.dev/v1"},
		{"flows.knative.dev/v1alpha1", kindSequence, false, "rewrite it as flows.knative.dev/v1"},
		{"flows.knative.dev/v1alpha1", kindParallel, false, "rewrite it as flows.knative.dev/v1"},
		{"sources.knative.dev/v1alpha2", kindPingSource, false, `apiVersion "sources.knative.dev/v1alpha2" of PingSource was removed from Knative and its schema differs (spec.jsonData became spec.data); rewrite it as sources.knative.dev/v1`},
		{"sources.knative.dev/v1beta1", kindPingSource, false, "(spec.jsonData became spec.data); rewrite it as sources.knative.dev/v1"},
		{"eventing.knative.dev/v2", kindBroker, false, `apiVersion "eventing.knative.dev/v2" is not supported for Broker; use eventing.knative.dev/v1`},
		{"sources.knative.dev/v1alpha1", kindPingSource, false, `apiVersion "sources.knative.dev/v1alpha1" is not supported for PingSource; use sources.knative.dev/v1`},
	} {
		name := "obj"
		if tt.kind == kindBroker || tt.kind == kindInMemory {
			name = "other" // not the base's
		}
		cfg := readYAML(t, base+"---\napiVersion: "+tt.apiVersion+"\nkind: "+tt.kind+"\nmetadata: {name: "+name+"}\nspec: "+specs[tt.kind]+"\n")
		o := status(t, cfg, tt.kind+" default/"+name)
		if o.Ready != tt.ready || !strings.Contains(o.Reason, tt.reason) || (tt.reason == "" && o.Reason != "") {
			t.Errorf("%s %s: ready %v, reason %q; want ready %v, reason %q", tt.apiVersion, tt.kind, o.Ready, o.Reason, tt.ready, tt.reason)
		}
	}
}

func TestReadDocuments(t *testing.T) {
	broker := []byte(`{"apiVersion":"eventing.knative.dev/v1","kind":"Broker","metadata":{"name":"b","namespace":"shop","annotations":{"eventing.knative.dev/broker.class":"Sluice"}},"status":{"conditions":[]}}`)
	trigger := []byte(`{"apiVersion":"eventing.knative.dev/v1","kind":"Trigger","metadata":{"name":"t","namespace":"shop","uid":"u","generation":2},"spec":{"broker":"b","subscriber":{"uri":"http://127.0.0.1:9/x"}}}`)
	bad := []byte(`{"apiVersion":"eventing.knative.dev/v1","kind":"Trigger","metadata":{"name":"bad","namespace":"shop"},"spec":{"broker":"b","bogus":1}}`)
	tests := []struct {
		name    string
		docs    []Document
		ready   map[string]bool
		wantErr string
	}{
		{"objects", []Document{{"api: brokers/shop/b", broker}, {"api: triggers/shop/t", trigger}, {"api: triggers/shop/bad", bad}},
			map[string]bool{"Broker shop/b": true, "Trigger shop/t": true, "Trigger shop/bad": false}, ""},
		{"too large", []Document{{"api: big", make([]byte, MaxConfigBytes+1)}}, nil, "larger than 32 MiB (config.MaxConfigBytes)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ReadDocuments(tc.docs, WithIngressURL("http://127.0.0.1:8080"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, o := range cfg.Objects {
				got[o.Key()] = o.Ready
			}
			if !maps.Equal(got, tc.ready) {
				t.Errorf("ready %v, want %v; objects %+v", got, tc.ready, cfg.Objects)
			}
			if o := status(t, cfg, "Trigger shop/bad"); !strings.Contains(o.Reason, "spec.bogus: unknown field") || o.File != "api: triggers/shop/bad" {
				t.Errorf("bad trigger: %+v", o)
			}
			if o := status(t, cfg, "Broker shop/b"); o.Address != "http://127.0.0.1:8080/shop/b" {
				t.Errorf("broker address %q", o.Address)
			}
		})
	}
}
