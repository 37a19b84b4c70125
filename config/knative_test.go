package config

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readYAML reads yaml as one file x.yaml of its own directory, with opts.
func readYAML(t *testing.T, yaml string, opts ...Option) *Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Read([]string{p}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func status(t *testing.T, cfg *Config, key string) ObjectStatus {
	t.Helper()
	for _, o := range cfg.Objects {
		if o.Key() == key {
			return o
		}
	}
	t.Fatalf("no object %s in %+v", key, cfg.Objects)
	return ObjectStatus{}
}

func refURL(o ObjectStatus, field string) (string, string) {
	for _, r := range o.Refs {
		if r.Field == field {
			return r.URL, r.Via
		}
	}
	return "", ""
}

const kBroker = "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: shop}\n"

func kTrigger(name, subscriber string) string {
	return "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: " + name + ", namespace: shop}\n" +
		"spec:\n  broker: b\n  subscriber:\n" + subscriber
}

// TestRefResolution: a ref resolves to an object of the configuration, an entry of
// --refs, a template of config-kreference-mapping or, for a Service, the ref URL
// template; any other ref makes the referring object not ready, naming it. No address
// is ever invented.
func TestRefResolution(t *testing.T) {
	refs := filepath.Join(t.TempDir(), "refs.yaml")
	if err := os.WriteFile(refs, []byte(`- {apiVersion: serving.knative.dev/v1, kind: Service, namespace: shop, name: listed, url: "http://10.1.2.3:8080/base/"}
- {kind: Service, namespace: other, name: anyversion, url: "http://10.9.9.9/"}
- {apiVersion: eventing.knative.dev/v1, kind: Broker, namespace: shop, name: outside, url: "http://10.5.5.5/shop/outside"}
- {apiVersion: sinks.knative.dev/v1alpha1, kind: JobSink, namespace: shop, name: listed-job, url: "http://10.6.6.6/"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := func(apiVersion, kind, name string) string {
		return "    ref: {apiVersion: " + apiVersion + ", kind: " + kind + ", name: " + name + "}\n"
	}
	mapping := "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-kreference-mapping, namespace: knative-eventing}\ndata:\n" +
		"  _example: ignored\n" +
		"  JobSink.v1alpha1.sinks.knative.dev: \"http://job-sink.{{.SystemNamespace}}.svc.cluster.local/{{.Namespace}}/{{.Name}}\"\n" +
		"  JobDefinition.v1: \"https://jobs.example/{{.Name}}{{.UID}}\"\n"
	// Every kind Sluice runs a ref may name, missing: not ready, naming it.
	var missing []struct{ name, apiVersion, kind string }
	for kind, group := range addressable {
		av := group + "/v1"
		if kind == kindKafkaChannel {
			av = apiMessagingBeta
		}
		missing = append(missing, struct{ name, apiVersion, kind string }{"missing-" + strings.ToLower(kind), av, kind})
	}
	yaml := kBroker + mapping +
		kTrigger("in-config", ref("eventing.knative.dev/v1", "Broker", "b")) +
		kTrigger("listed", "    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: listed}\n    uri: /hook?x=1\n") +
		kTrigger("any-version", "    ref: {apiVersion: v1, kind: Service, name: anyversion, namespace: other}\n") +
		kTrigger("template", "    ref: {apiVersion: v1, kind: Service, name: svc}\n    uri: /insert\n") +
		kTrigger("knative-service", ref("serving.knative.dev/v1", "Service", "ksvc")) +
		kTrigger("other-ns", "    ref: {apiVersion: v1, kind: Service, name: svc, namespace: backend}\n") +
		kTrigger("plain", "    uri: http://127.0.0.1:9/x\n") +
		kTrigger("broker-in-refs", ref("eventing.knative.dev/v1", "Broker", "outside")) +
		kTrigger("refs-over-mapping", ref("sinks.knative.dev/v1alpha1", "JobSink", "listed-job")) +
		kTrigger("mapping", ref("sinks.knative.dev/v1alpha1", "JobSink", "job")) +
		kTrigger("mapping-core", ref("v1", "JobDefinition", "nightly")) +
		kTrigger("deployment", ref("apps/v1", "Deployment", "d")) +
		kTrigger("jobsink-other-version", ref("sinks.knative.dev/v1", "JobSink", "job"))
	for _, m := range missing {
		yaml += kTrigger(m.name, ref(m.apiVersion, m.kind, "missing"))
	}
	cfg := readYAML(t, yaml, WithIngressURL("http://sluice.local:9090"), WithRefsFile(refs),
		WithRefURLTemplate("http://{{.Name}}.{{.Namespace}}.{{.Resource}}.example"))
	tests := []struct{ trigger, url, via, reason string }{
		{"in-config", "http://sluice.local:9090/shop/b", ViaConfig, ""},
		{"listed", "http://10.1.2.3:8080/hook?x=1", ViaRefsFile, ""},
		{"any-version", "http://10.9.9.9/", ViaRefsFile, ""},
		{"template", "http://svc.shop.service.example/insert", ViaTemplate, ""},
		{"knative-service", "http://ksvc.shop.service.example", ViaTemplate, ""},
		{"other-ns", "http://svc.backend.service.example", ViaTemplate, ""},
		{"plain", "http://127.0.0.1:9/x", ViaURI, ""},
		{"broker-in-refs", "http://10.5.5.5/shop/outside", ViaRefsFile, ""},
		{"refs-over-mapping", "http://10.6.6.6/", ViaRefsFile, ""},
		{"mapping", "http://job-sink.knative-eventing.svc.cluster.local/shop/job", ViaMapping, ""},
		{"mapping-core", "https://jobs.example/nightly", ViaMapping, ""},
		{"deployment", "", "", "spec.subscriber.ref: apps/v1 Deployment shop/d is not in --refs or ConfigMap knative-eventing/config-kreference-mapping; only a Service (v1 or serving.knative.dev/v1) is addressed by --ref-url-template"},
		{"jobsink-other-version", "", "", "spec.subscriber.ref: sinks.knative.dev/v1 JobSink shop/job is not in --refs or ConfigMap knative-eventing/config-kreference-mapping"},
	}
	for _, m := range missing {
		tests = append(tests, struct{ trigger, url, via, reason string }{m.name, "", "",
			"spec.subscriber.ref: " + m.kind + " shop/missing is not in the configuration or --refs"})
	}
	for _, tt := range tests {
		o := status(t, cfg, "Trigger shop/"+tt.trigger)
		if tt.reason != "" {
			if o.Ready || !strings.HasPrefix(o.Reason, tt.reason) || len(o.Refs) != 0 {
				t.Errorf("%s: ready %v, reason %q, refs %+v; want not ready, reason %q", tt.trigger, o.Ready, o.Reason, o.Refs, tt.reason)
			}
			continue
		}
		if !o.Ready {
			t.Errorf("%s: not ready: %s", tt.trigger, o.Reason)
		}
		if u, via := refURL(o, "spec.subscriber"); u != tt.url || via != tt.via {
			t.Errorf("%s: %s via %s, want %s via %s", tt.trigger, u, via, tt.url, tt.via)
		}
	}
	if o := status(t, cfg, "ConfigMap knative-eventing/config-kreference-mapping"); !o.Ready {
		t.Errorf("the mapping: %+v", o)
	}
	for _, tr := range cfg.Brokers[0].Triggers {
		if tr.Name == "listed" && tr.Subscriber != "http://10.1.2.3:8080/hook?x=1" {
			t.Errorf("the trigger delivers to %q", tr.Subscriber)
		}
		if strings.HasPrefix(tr.Name, "missing-") || tr.Name == "deployment" {
			t.Errorf("trigger %s runs, to %q", tr.Name, tr.Subscriber)
		}
	}
}

// TestRefMappingErrors: an invalid entry of config-kreference-mapping makes the
// ConfigMap not ready naming the key, and a ref to its kind not ready naming the entry;
// the valid entries apply.
func TestRefMappingErrors(t *testing.T) {
	cfg := readYAML(t, kBroker+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-kreference-mapping, namespace: knative-eventing}\ndata:\n"+
		"  Good.v1.example.com: \"http://good/{{.Name}}\"\n"+
		"  Nope.v1.example.com: \"http://x/{{.Nope}}\"\n"+
		"  Loop.v1.example.com: \"http://x/{{range 1000000000}}{{end}}\"\n"+
		"  Calls.v1.example.com: \"{{define \\\"a\\\"}}x{{end}}http://x/{{template \\\"a\\\"}}\"\n"+
		"  Rel.v1.example.com: \"/{{.Name}}\"\n"+
		"  Wide.v1.example.com: \"http://x/{{printf \\\"%999999d\\\" 1}}\"\n"+
		"  NoVersion: \"http://x/\"\n"+
		kTrigger("good", "    ref: {apiVersion: example.com/v1, kind: Good, name: g}\n")+
		kTrigger("bad", "    ref: {apiVersion: example.com/v1, kind: Nope, name: nn}\n"))
	cm := status(t, cfg, "ConfigMap knative-eventing/config-kreference-mapping")
	for _, want := range []string{"data.Nope.v1.example.com: ", "data.Loop.v1.example.com: ", "data.Calls.v1.example.com: a template may not define templates",
		"data.Rel.v1.example.com: renders \"/n\", not an absolute http or https URL", "data.Wide.v1.example.com: renders more than 8192 bytes (config.MaxRefURLBytes)",
		"data.NoVersion: the key is not <Kind>.<version>.<group>"} {
		if cm.Ready || !strings.Contains(cm.Reason, want) {
			t.Errorf("the mapping's reason %q lacks %q", cm.Reason, want)
		}
	}
	if u, via := refURL(status(t, cfg, "Trigger shop/good"), "spec.subscriber"); u != "http://good/g" || via != ViaMapping {
		t.Errorf("good entry: %s via %s", u, via)
	}
	if o := status(t, cfg, "Trigger shop/bad"); o.Ready || !strings.Contains(o.Reason, "spec.subscriber.ref: Nope shop/nn: the entry data.Nope.v1.example.com of ConfigMap knative-eventing/config-kreference-mapping is invalid") {
		t.Errorf("bad entry: %+v", o)
	}
}

func TestOptionErrors(t *testing.T) {
	for _, tt := range []struct {
		opt  Option
		want string
	}{
		{WithIngressURL("localhost:8080"), "WithIngressURL"},
		{WithRefURLTemplate("http://{{.Nope}}"), "WithRefURLTemplate"},
		{WithRefURLTemplate("{{.Name}}"), "not an http or https URL"},
	} {
		if _, err := Read([]string{"testdata/demo.yaml"}, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
	bad := filepath.Join(t.TempDir(), "refs.yaml")
	os.WriteFile(bad, []byte("- {kind: Service, name: x, url: \"/rel\"}\n- {kind: Service, url: \"http://a/\"}\n"), 0o644)
	_, err := Read([]string{"testdata/demo.yaml"}, WithRefsFile(bad))
	if err == nil || !strings.Contains(err.Error(), `entry 1 (Service default/x): url "/rel"`) || !strings.Contains(err.Error(), "entry 2: kind and name are required") {
		t.Errorf("refs file errors: %v", err)
	}
}

func TestObjectsStandAlone(t *testing.T) {
	cfg := readYAML(t, `apiVersion: v1
kind: List
items:
- apiVersion: eventing.knative.dev/v1beta1
  kind: Broker
  metadata: {name: b, namespace: shop, uid: 1234, managedFields: [{manager: kubectl}]}
  status: {address: {url: "http://broker-ingress.knative-eventing.svc.cluster.local/shop/b"}}
- apiVersion: eventing.knative.dev/v1
  kind: Trigger
  metadata: {name: ok, namespace: shop}
  spec: {broker: b, subscriber: {uri: "http://a/"}}
- apiVersion: eventing.knative.dev/v1
  kind: Trigger
  metadata: {name: nobroker, namespace: shop}
  spec: {broker: gone, subscriber: {uri: "http://a/"}}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: d, namespace: shop}
- apiVersion: sources.knative.dev/v1
  kind: ApiServerSource
  metadata: {name: s, namespace: shop}
- apiVersion: eventing.knative.dev/v1
  kind: Trigger
  metadata: {name: fields, namespace: shop}
  spec: {broker: b, brokerRef: {name: b}, subscriber: {uri: "http://a/", audience: ""}, delivery: {format: JSON}}
`)
	want := map[string]string{
		"Broker shop/b":          "",
		"Trigger shop/ok":        "",
		"Trigger shop/nobroker":  "spec.broker: Broker shop/gone is not in the configuration",
		"Deployment shop/d":      "skipped",
		"ApiServerSource shop/s": "skipped",
		"Trigger shop/fields":    "spec.broker, spec.brokerRef: give one or the other",
	}
	for key, w := range want {
		o := status(t, cfg, key)
		switch {
		case w == "skipped":
			if !o.Skipped || o.Ready {
				t.Errorf("%s: %+v, want skipped", key, o)
			}
		case w == "":
			if !o.Ready {
				t.Errorf("%s: not ready: %s", key, o.Reason)
			}
		default:
			if o.Ready || !strings.Contains(o.Reason, w) {
				t.Errorf("%s: reason %q, want %q", key, o.Reason, w)
			}
		}
	}
	f := status(t, cfg, "Trigger shop/fields")
	for _, w := range []string{"spec.subscriber.audience: empty", `spec.delivery.format: "JSON" is not binary or json`} {
		if !strings.Contains(f.Reason, w) {
			t.Errorf("reason %q lacks %q", f.Reason, w)
		}
	}
	if len(cfg.Brokers) != 1 || len(cfg.Brokers[0].Triggers) != 1 || cfg.Ready() || cfg.Err() == nil {
		t.Errorf("brokers %+v, ready %v", cfg.Brokers, cfg.Ready())
	}
}

func TestPingSourceSpec(t *testing.T) {
	ping := func(name, spec string) string {
		return "---\napiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: " + name + ", namespace: shop}\nspec:\n" + spec
	}
	cfg := readYAML(t, kBroker+
		ping("ok", "  schedule: \"*/2 * * * *\"\n  timezone: Europe/Berlin\n  dataBase64: ZGF0YQ==\n  contentType: text/plain\n  ceOverrides: {extensions: {region: eu}}\n  sink: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}}\n")+
		ping("tz-twice", "  schedule: \"CRON_TZ=UTC * * * * *\"\n  timezone: Europe/Berlin\n  sink: {uri: \"http://a/\"}\n")+
		ping("bad", "  schedule: every minute\n  timezone: Mars/Olympus\n  data: x\n  dataBase64: eA==\n  ceOverrides: {extensions: {Bad_Name: x}}\n  sink: {uri: \"http://a/\"}\n"),
		WithIngressURL("http://s:1"))
	if len(cfg.PingSources) != 1 {
		t.Fatalf("ping sources %+v", cfg.PingSources)
	}
	p := cfg.PingSources[0]
	if p.Schedule != "CRON_TZ=Europe/Berlin */2 * * * *" || string(p.Data) != "data" || p.ContentType != "text/plain" ||
		p.Sink != "http://s:1/shop/b" || p.Extensions["region"] != "eu" || p.EventSource() != "/apis/v1/namespaces/shop/pingsources/ok" {
		t.Errorf("ping source %+v", p)
	}
	if o := status(t, cfg, "PingSource shop/tz-twice"); !strings.Contains(o.Reason, "not both") {
		t.Errorf("tz-twice: %q", o.Reason)
	}
	o := status(t, cfg, "PingSource shop/bad")
	for _, w := range []string{"spec.timezone: \"Mars/Olympus\"", "spec.schedule: \"every minute\" is not a cron schedule",
		"spec.data, spec.dataBase64: give one or the other", "spec.ceOverrides.extensions.Bad_Name"} {
		if !strings.Contains(o.Reason, w) {
			t.Errorf("bad: reason %q lacks %q", o.Reason, w)
		}
	}
}

func TestBrokerClasses(t *testing.T) {
	cm := func(ns, name, data string) string {
		return "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: " + ns + "}\ndata:\n" + data
	}
	br := func(name, ann, spec string) string {
		return "---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: " + name + ", namespace: shop, annotations: {" + ann + "}}\n" + spec
	}
	cfg := readYAML(t, cm("knative-eventing", "config-br-defaults", "  default-br-config: |\n    clusterDefault: {brokerClass: MTChannelBasedBroker, apiVersion: v1, kind: ConfigMap, name: config-br-default-channel, namespace: knative-eventing}\n    namespaceDefaults:\n      shop: {brokerClass: Kafka, apiVersion: v1, kind: ConfigMap, name: kafka, namespace: shop}\n")+
		cm("shop", "kafka", "  bootstrap.servers: \"k1:9092, k2:9092\"\n  default.topic.partitions: \"4\"\n")+
		cm("shop", "imc", "  channel-template-spec: |\n    apiVersion: messaging.knative.dev/v1\n    kind: InMemoryChannel\n")+
		cm("shop", "secret", "  bootstrap.servers: k:9092\n  auth.secret.ref.name: s\n")+
		cm("knative-eventing", "default-ch-webhook", "  default-ch-config: |\n    clusterDefault: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel}\n    namespaceDefaults:\n      shop: {apiVersion: messaging.knative.dev/v1beta1, kind: KafkaChannel, spec: {numPartitions: 2}}\n")+
		br("defaulted", "", "")+
		br("mt", "eventing.knative.dev/broker.class: MTChannelBasedBroker", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: imc}}\n")+
		br("sluice", "sluice.dev/channel: jetstream", "")+
		br("sluiceclass", "eventing.knative.dev/broker.class: Sluice", "")+
		br("sluicejs", "eventing.knative.dev/broker.class: Sluice, sluice.dev/channel: jetstream", "")+
		br("sluicecfg", "eventing.knative.dev/broker.class: Sluice", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: imc}}\n")+
		br("conflict", "eventing.knative.dev/broker.class: Kafka, sluice.dev/channel: memory", "")+
		br("rabbit", "eventing.knative.dev/broker.class: RabbitMQBroker", "")+
		br("secret", "eventing.knative.dev/broker.class: Kafka", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: secret}}\n")+
		br("topic", "eventing.knative.dev/broker.class: MTChannelBasedBroker, kafka.eventing.knative.dev/external.topic: t", "")+
		br("missing", "eventing.knative.dev/broker.class: Kafka", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: nope}}\n")+
		"---\napiVersion: messaging.knative.dev/v1\nkind: Channel\nmetadata: {name: ch, namespace: shop}\n")
	b := func(key string) Broker {
		for _, x := range cfg.Brokers {
			if x.Key() == key {
				return x
			}
		}
		t.Fatalf("no broker %s; objects %+v", key, cfg.Objects)
		return Broker{}
	}
	if d := b("shop/defaulted"); d.Class != classKafka || d.Channel != ChannelKafka ||
		!maps.Equal(d.Settings, Settings{"data.bootstrap.servers": "k1:9092, k2:9092", "data.default.topic.partitions": "4"}) {
		t.Errorf("defaulted: %+v", d)
	}
	if m := b("shop/mt"); m.Channel != ChannelMemory {
		t.Errorf("mt: %+v", m)
	}
	if s := b("shop/sluice"); s.Channel != ChannelJetStream {
		t.Errorf("sluice: %+v", s)
	}
	if s := b("shop/sluiceclass"); s.Class != ClassSluice || s.Channel != ChannelDefault {
		t.Errorf("class Sluice: %+v", s)
	}
	if s := b("shop/sluicejs"); s.Class != ClassSluice || s.Channel != ChannelJetStream {
		t.Errorf("class Sluice on jetstream: %+v", s)
	}
	if c := b("shop/ch"); c.Channel != ChannelKafka || !maps.Equal(c.Settings, Settings{"spec.numPartitions": "2"}) {
		t.Errorf("channel defaulted by default-ch-webhook: %+v", c)
	}
	for key, w := range map[string]string{
		"Broker shop/conflict":  `metadata.annotations.sluice.dev/channel: "memory" conflicts with the kafka backend`,
		"Broker shop/rabbit":    `spec.config: required: a RabbitMQBroker broker names a RabbitmqBrokerConfig`,
		"Broker shop/secret":    "data.auth.secret.ref.name: supported by Knative, not by Sluice",
		"Broker shop/topic":     "external.topic: only for a broker of class Kafka",
		"Broker shop/missing":   "spec.config: ConfigMap shop/nope is not in the configuration",
		"Broker shop/sluicecfg": "spec.config: a broker of class Sluice reads no ConfigMap",
	} {
		if o := status(t, cfg, key); o.Ready || !strings.Contains(o.Reason, w) {
			t.Errorf("%s: %q, want %q", key, o.Reason, w)
		}
	}
}

func TestFlowsAndForwarding(t *testing.T) {
	cfg := readYAML(t, `apiVersion: flows.knative.dev/v1
kind: Sequence
metadata: {name: s, namespace: shop}
spec:
  steps: [{uri: "http://a/"}, {uri: "http://b/", delivery: {retry: 7}}]
---
apiVersion: messaging.knative.dev/v1
kind: InMemoryChannel
metadata: {name: s-kn-sequence-1, namespace: shop}
---
apiVersion: flows.knative.dev/v1
kind: Parallel
metadata: {name: p, namespace: shop}
spec:
  branches: [{subscriber: {uri: "http://a/"}, reply: {uri: "http://r/"}}]
---
apiVersion: messaging.knative.dev/v1
kind: InMemoryChannel
metadata: {name: c, namespace: shop}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: forward, namespace: shop}
spec:
  channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: c}
  reply: {ref: {apiVersion: flows.knative.dev/v1, kind: Parallel, name: p}}
`, WithIngressURL("http://s:1"))
	if o := status(t, cfg, "Sequence shop/s"); o.Ready || !strings.Contains(o.Reason, "its channel s-kn-sequence-1 has the same namespace and name as InMemoryChannel shop/s-kn-sequence-1") {
		t.Errorf("sequence clashing with a channel: %+v", o)
	}
	var fwd Trigger
	var branch Broker
	for _, b := range cfg.Brokers {
		if b.Key() == "shop/c" {
			fwd = b.Triggers[0]
		}
		if b.Key() == "shop/p-kn-parallel-0" {
			branch = b
		}
	}
	if fwd.Subscriber != "http://s:1/shop/p-kn-parallel" || fwd.Reply != "" {
		t.Errorf("a subscription with only a reply forwards to it: %+v", fwd)
	}
	if len(branch.Triggers) != 1 || branch.Triggers[0].Reply != "http://r/" || branch.Owner != "Parallel shop/p" {
		t.Errorf("branch reply: %+v", branch)
	}
}

func TestChildName(t *testing.T) {
	if got := childName("short", "-kn-sequence-0"); got != "short-kn-sequence-0" {
		t.Errorf("%q", got)
	}
	long := strings.Repeat("a", 60)
	got := childName(long, "-kn-parallel-filter-1")
	if len(got) > 63 || dnsLabel(got) != "" || got == childName(long, "-kn-parallel-filter-2") {
		t.Errorf("childName(long) = %q", got)
	}
}

// TestLastGoodVersions: an invalid edit keeps the object's last good version, even
// when the file no longer parses at all; a ref to an object that is not ready is an
// error, not a fallback to the template.
func TestLastGoodVersions(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.yaml")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := kBroker + kTrigger("t", "    uri: http://a/\n")
	write(good)
	first, err := Read([]string{p})
	if err != nil || !first.Ready() {
		t.Fatalf("%v %+v", err, first.Objects)
	}
	write(kBroker + kTrigger("t", "    uri: /relative\n"))
	second, _ := Read([]string{p}, WithPrevious(first))
	tr := status(t, second, "Trigger shop/t")
	if tr.Ready || !strings.Contains(tr.Reason, "the last good version runs") || len(second.Brokers[0].Triggers) != 1 ||
		second.Brokers[0].Triggers[0].Subscriber != "http://a/" {
		t.Errorf("invalid edit: %+v %+v", tr, second.Brokers)
	}
	write("apiVersion: eventing.knative.dev/v1\nkind: [Broker\n")
	third, _ := Read([]string{p}, WithPrevious(second))
	if len(third.Brokers) != 1 || len(third.Brokers[0].Triggers) != 1 {
		t.Fatalf("a file that does not parse dropped its objects: %+v", third.Brokers)
	}
	if b := status(t, third, "Broker shop/b"); !strings.Contains(b.Reason, "its file is invalid (document 1: invalid YAML") {
		t.Errorf("broker status %+v", b)
	}
	write(good)
	fourth, _ := Read([]string{p}, WithPrevious(third))
	if !fourth.Ready() {
		t.Errorf("fixed file: %+v", fourth.Objects)
	}

	notReady := readYAML(t, "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, annotations: {eventing.knative.dev/broker.class: Nope}}\n"+
		"---\napiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: p}\nspec: {sink: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}}}\n")
	if o := status(t, notReady, "PingSource default/p"); o.Ready || !strings.Contains(o.Reason, "spec.sink.ref: Broker default/b is not ready") {
		t.Errorf("ref to a broker that is not ready: %+v", o)
	}
}

// TestRefFieldsNeverInvent: every field a ref may be written in refuses a ref to a Broker
// that is not in the configuration, naming the field.
func TestRefFieldsNeverInvent(t *testing.T) {
	missing := "{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: missing}}"
	for _, tt := range []struct{ name, yaml, key, field string }{
		{"dead-letter sink", kBroker + kTrigger("t", "    uri: http://a/\n") + "  delivery: {deadLetterSink: " + missing + "}\n",
			"Trigger shop/t", "spec.delivery.deadLetterSink"},
		{"broker dead-letter sink", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: shop}\nspec: {delivery: {deadLetterSink: " + missing + "}}\n",
			"Broker shop/b", "spec.delivery.deadLetterSink"},
		{"ping sink", "apiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: p, namespace: shop}\nspec: {sink: " + missing + "}\n",
			"PingSource shop/p", "spec.sink"},
		{"sequence step", "apiVersion: flows.knative.dev/v1\nkind: Sequence\nmetadata: {name: s, namespace: shop}\nspec: {steps: [" + missing + "]}\n",
			"Sequence shop/s", "spec.steps[0]"},
		{"sequence reply", "apiVersion: flows.knative.dev/v1\nkind: Sequence\nmetadata: {name: s, namespace: shop}\nspec: {steps: [{uri: \"http://a/\"}], reply: " + missing + "}\n",
			"Sequence shop/s", "spec.reply"},
		{"parallel subscriber", "apiVersion: flows.knative.dev/v1\nkind: Parallel\nmetadata: {name: p, namespace: shop}\nspec: {branches: [{subscriber: " + missing + "}]}\n",
			"Parallel shop/p", "spec.branches[0].subscriber"},
		{"subscription subscriber", "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: c, namespace: shop}\n---\napiVersion: messaging.knative.dev/v1\nkind: Subscription\nmetadata: {name: s, namespace: shop}\nspec: {channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: c}, subscriber: " + missing + "}\n",
			"Subscription shop/s", "spec.subscriber"},
		{"subscription reply", "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: c, namespace: shop}\n---\napiVersion: messaging.knative.dev/v1\nkind: Subscription\nmetadata: {name: s, namespace: shop}\nspec: {channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: c}, subscriber: {uri: \"http://a/\"}, reply: " + missing + "}\n",
			"Subscription shop/s", "spec.reply"},
	} {
		o := status(t, readYAML(t, tt.yaml), tt.key)
		want := tt.field + ".ref: Broker shop/missing is not in the configuration or --refs"
		if o.Ready || !strings.Contains(o.Reason, want) {
			t.Errorf("%s: ready %v, reason %q; want %q", tt.name, o.Ready, o.Reason, want)
		}
	}
}

// TestTriggerBrokerRef: a Trigger's spec.brokerRef (Knative's cross-namespace triggers)
// attaches it to the Broker it names, in that Broker's namespace.
func TestTriggerBrokerRef(t *testing.T) {
	trig := func(name, spec string) string {
		return "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: " + name + ", namespace: apps}\n" +
			"spec: {subscriber: {uri: \"http://a/\"}, " + spec + "}\n"
	}
	cfg := readYAML(t, kBroker+
		"---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: apps}\n"+
		trig("cross", "brokerRef: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b, namespace: shop}")+
		trig("local-ref", "brokerRef: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}")+
		trig("local", "broker: b")+
		trig("missing", "brokerRef: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: gone, namespace: shop}")+
		trig("both", "broker: b, brokerRef: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b, namespace: shop}")+
		trig("neither", "filters: []")+
		trig("not-broker", "brokerRef: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: b, namespace: shop}"))
	on := map[string]string{} // trigger → the broker it is attached to
	for _, b := range cfg.Brokers {
		for _, tr := range b.Triggers {
			on[tr.Namespace+"/"+tr.Name] = b.Key()
		}
	}
	for _, tt := range []struct{ trigger, broker, reason string }{
		{"cross", "shop/b", ""},
		{"local-ref", "apps/b", ""},
		{"local", "apps/b", ""},
		{"missing", "", "spec.brokerRef: Broker shop/gone is not in the configuration"},
		{"both", "", "spec.broker, spec.brokerRef: give one or the other"},
		{"neither", "", "spec.broker: required (or spec.brokerRef)"},
		{"not-broker", "", `spec.brokerRef: messaging.knative.dev/v1 "InMemoryChannel" is not a Broker`},
	} {
		o := status(t, cfg, "Trigger apps/"+tt.trigger)
		if got := on["apps/"+tt.trigger]; got != tt.broker {
			t.Errorf("%s: attached to %q, want %q", tt.trigger, got, tt.broker)
		}
		if tt.reason == "" && !o.Ready || tt.reason != "" && (o.Ready || !strings.HasPrefix(o.Reason, tt.reason)) {
			t.Errorf("%s: ready %v, reason %q; want reason %q", tt.trigger, o.Ready, o.Reason, tt.reason)
		}
	}
}

// TestMessagesNameTheBlocker: each object's reason is exactly the real blocker, said
// once: the class of a broker Sluice does not run (not its spec.config), a field
// Knative removed (not "supported by Knative"), and for a ref or spec.channel naming an
// object Sluice skipped, that object and why it was skipped.
func TestMessagesNameTheBlocker(t *testing.T) {
	cfg := readYAML(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: rabbit, namespace: shop, annotations: {eventing.knative.dev/broker.class: ExampleBroker}}
spec:
  config: {apiVersion: eventing.knative.dev/v1alpha1, kind: RabbitmqBrokerConfig, name: rabbit-config}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: cm-kind, namespace: shop}
spec:
  config: {apiVersion: eventing.knative.dev/v1alpha1, kind: RabbitmqBrokerConfig, name: rabbit-config}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: json, namespace: shop}
spec: {jsonData: '{"a": 1}', sink: {uri: "http://a/"}}
---
apiVersion: messaging.knative.dev/v1alpha1
kind: NatssChannel
metadata: {name: natss, namespace: shop}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: to-natss, namespace: shop}
spec: {sink: {ref: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatssChannel, name: natss}}}
---
apiVersion: example.com/v1
kind: InMemoryChannel
metadata: {name: foreign, namespace: shop}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: to-foreign, namespace: shop}
spec: {sink: {ref: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: foreign}}}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: on-foreign, namespace: shop}
spec: {channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: foreign}, subscriber: {uri: "http://a/"}}
`)
	for _, tt := range []struct{ key, reason string }{
		{"Broker shop/rabbit", `metadata.annotations.eventing.knative.dev/broker.class: "ExampleBroker" is not a broker class Sluice runs (Sluice, MTChannelBasedBroker, Kafka, KafkaNamespaced, NatsJetStreamBroker, RabbitMQBroker)`},
		{"Broker shop/cm-kind", `spec.config: eventing.knative.dev/v1alpha1 "RabbitmqBrokerConfig" is not supported; a MTChannelBasedBroker broker reads a v1 ConfigMap`},
		{"PingSource shop/json", "spec.jsonData: removed from Knative (not a field of this apiVersion): a field of sources.knative.dev/v1alpha2 and v1beta1 PingSource only; write the same text as spec.data"},
		{"PingSource shop/to-natss", "spec.sink.ref: NatssChannel shop/natss (messaging.knative.dev/v1alpha1, x.yaml document 4): Sluice does not run Knative's NatssChannel (messaging.knative.dev/v1alpha1); it is skipped; give its address in --refs or ConfigMap knative-eventing/config-kreference-mapping"},
		{"PingSource shop/to-foreign", "spec.sink.ref: InMemoryChannel shop/foreign (example.com/v1, x.yaml document 6): a InMemoryChannel (example.com/v1) is not an eventing object; Sluice skips it; give its address in --refs or ConfigMap knative-eventing/config-kreference-mapping"},
		{"Subscription shop/on-foreign", "spec.channel: InMemoryChannel shop/foreign (example.com/v1, x.yaml document 6): a InMemoryChannel (example.com/v1) is not an eventing object; Sluice skips it"},
	} {
		o := status(t, cfg, tt.key)
		if o.Ready || strings.ReplaceAll(o.Reason, o.File, "x.yaml") != tt.reason {
			t.Errorf("%s: ready %v, reason\n%q\nwant\n%q", tt.key, o.Ready, o.Reason, tt.reason)
		}
	}
}

// TestRefResolver: WithRefResolver resolves what the configuration, --refs and the
// mapping do not, before the template; its error makes the referring object not ready
// with that reason; a kind it does not know resolves as without it.
func TestRefResolver(t *testing.T) {
	refs := filepath.Join(t.TempDir(), "refs.yaml")
	if err := os.WriteFile(refs, []byte(`- {apiVersion: v1, kind: Service, namespace: shop, name: listed, url: "http://10.1.2.3/"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cluster := func(apiVersion, kind, ns, name string) (string, bool, error) {
		switch {
		case kind == "Deployment":
			return "", false, nil
		case name == "absent":
			return "", false, errors.New("Service shop/absent does not exist")
		case name == "bad":
			return "ftp://x", true, nil
		}
		return "http://" + name + "." + ns + ".cluster:8081", true, nil
	}
	ref := func(apiVersion, kind, name string) string {
		return "    ref: {apiVersion: " + apiVersion + ", kind: " + kind + ", name: " + name + "}\n"
	}
	yaml := kBroker +
		kTrigger("in-config", ref("eventing.knative.dev/v1", "Broker", "b")) +
		kTrigger("listed", ref("v1", "Service", "listed")) +
		kTrigger("cluster", ref("serving.knative.dev/v1", "Service", "ksvc")+"    uri: /x\n") +
		kTrigger("other-broker", ref("eventing.knative.dev/v1", "Broker", "rabbit")) +
		kTrigger("absent", ref("v1", "Service", "absent")) +
		kTrigger("bad", ref("v1", "Service", "bad")) +
		kTrigger("unknown-kind", ref("apps/v1", "Deployment", "d"))
	cfg := readYAML(t, yaml, WithIngressURL("http://sluice.local:9090"), WithRefsFile(refs), WithRefResolver(cluster))
	tests := []struct{ trigger, url, via, reason string }{
		{"in-config", "http://sluice.local:9090/shop/b", ViaConfig, ""},
		{"listed", "http://10.1.2.3/", ViaRefsFile, ""},
		{"cluster", "http://ksvc.shop.cluster:8081/x", ViaCluster, ""},
		{"other-broker", "http://rabbit.shop.cluster:8081", ViaCluster, ""},
		{"absent", "", "", "spec.subscriber.ref: Service shop/absent does not exist"},
		{"bad", "", "", `spec.subscriber.ref: Service shop/bad: address "ftp://x" is not an absolute http or https URL`},
		{"unknown-kind", "", "", "spec.subscriber.ref: apps/v1 Deployment shop/d is not in --refs"},
	}
	for _, tt := range tests {
		o := status(t, cfg, "Trigger shop/"+tt.trigger)
		if tt.reason != "" {
			if o.Ready || !strings.HasPrefix(o.Reason, tt.reason) {
				t.Errorf("%s: ready %v, reason %q; want not ready, reason %q", tt.trigger, o.Ready, o.Reason, tt.reason)
			}
			continue
		}
		if u, via := refURL(o, "spec.subscriber"); !o.Ready || u != tt.url || via != tt.via {
			t.Errorf("%s: ready %v (%s), %s via %s, want %s via %s", tt.trigger, o.Ready, o.Reason, u, via, tt.url, tt.via)
		}
	}
}

// TestBrokerDefaultClass: the class of a Broker with no class annotation comes from
// config-br-defaults as the file mode reads it, or is Knative's stock default.
func TestBrokerDefaultClass(t *testing.T) {
	tests := []struct {
		name, yaml, ns, class, err string
		none                       bool
	}{
		{name: "no ConfigMap", none: true, ns: "a", class: "MTChannelBasedBroker"},
		{name: "cluster default", yaml: "clusterDefault: {brokerClass: Sluice}", ns: "a", class: "Sluice"},
		{name: "namespace default", yaml: "clusterDefault: {brokerClass: Kafka}\nnamespaceDefaults:\n  b: {brokerClass: Sluice}", ns: "b", class: "Sluice"},
		{name: "other namespace", yaml: "clusterDefault: {brokerClass: Kafka}\nnamespaceDefaults:\n  b: {brokerClass: Sluice}", ns: "c", class: "Kafka"},
		{name: "namespace entry without class", yaml: "clusterDefault: {brokerClass: Kafka}\nnamespaceDefaults:\n  b: {delivery: {retry: 2}}", ns: "b", class: "Kafka"},
		{name: "empty", yaml: "", ns: "a", class: "MTChannelBasedBroker"},
		{name: "unsupported", yaml: "clusterDefault: {brokerClass: Sluice, brokerClasses: {}}", ns: "a", class: "MTChannelBasedBroker",
			err: "ConfigMap knative-eventing/config-br-defaults: data.default-br-config.clusterDefault.brokerClasses"},
		{name: "not YAML", yaml: "clusterDefault: [", ns: "a", class: "MTChannelBasedBroker",
			err: "ConfigMap knative-eventing/config-br-defaults: data.default-br-config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var data map[string]string
			if !tt.none {
				data = map[string]string{"default-br-config": tt.yaml}
			}
			class, err := BrokerDefaultClass(data, tt.ns)
			if class != tt.class || (err == nil) != (tt.err == "") || (err != nil && !strings.HasPrefix(err.Error(), tt.err)) {
				t.Errorf("class %q, err %v; want %q, err %q", class, err, tt.class, tt.err)
			}
		})
	}
}

// TestFlowChannels: a Sequence's and a Parallel's status lists the channels they run
// on and the subscriptions on each, named as Knative names them; a flow that runs
// nothing lists none, and one whose edit is invalid lists its last good version's.
func TestFlowChannels(t *testing.T) {
	const imc = "messaging.knative.dev/v1"
	seq := func(steps string) string {
		return "apiVersion: flows.knative.dev/v1\nkind: Sequence\nmetadata: {name: s, namespace: shop}\n" +
			"spec: {channelTemplate: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel}, steps: [" + steps + "]}\n"
	}
	par := "apiVersion: flows.knative.dev/v1\nkind: Parallel\nmetadata: {name: p, namespace: shop}\n" +
		"spec: {channelTemplate: {apiVersion: messaging.knative.dev/v1beta1, kind: KafkaChannel, spec: {numPartitions: 1}}, " +
		"branches: [{subscriber: {uri: \"http://a/\"}}, {filter: {uri: \"http://f/\"}, subscriber: {uri: \"http://b/\"}}]}\n"
	for _, tt := range []struct {
		name, yaml, key string
		want            []FlowChannel
	}{
		{"sequence", seq(`{uri: "http://a/"}, {uri: "http://b/"}`), "Sequence shop/s", []FlowChannel{
			{APIVersion: imc, Kind: "InMemoryChannel", Name: "s-kn-sequence-0", Subscriptions: []string{"s-kn-sequence-0"}, Ready: true},
			{APIVersion: imc, Kind: "InMemoryChannel", Name: "s-kn-sequence-1", Subscriptions: []string{"s-kn-sequence-1"}, Ready: true},
		}},
		{"parallel", par, "Parallel shop/p", []FlowChannel{
			{APIVersion: "messaging.knative.dev/v1beta1", Kind: "KafkaChannel", Name: "p-kn-parallel", Subscriptions: []string{"p-kn-parallel-filter-0", "p-kn-parallel-filter-1"}, Ready: true},
			{APIVersion: "messaging.knative.dev/v1beta1", Kind: "KafkaChannel", Name: "p-kn-parallel-0", Subscriptions: []string{"p-kn-parallel-0"}, Ready: true},
			{APIVersion: "messaging.knative.dev/v1beta1", Kind: "KafkaChannel", Name: "p-kn-parallel-1", Subscriptions: []string{"p-kn-parallel-1"}, Ready: true},
		}},
		{"a step that does not resolve", seq(`{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: missing}}`), "Sequence shop/s", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := status(t, readYAML(t, tt.yaml), tt.key)
			if !reflect.DeepEqual(o.FlowChannels, tt.want) {
				t.Errorf("FlowChannels %+v, want %+v (status %+v)", o.FlowChannels, tt.want, o)
			}
		})
	}
	t.Run("last good version", func(t *testing.T) {
		first := readYAML(t, seq(`{uri: "http://a/"}`))
		second, err := ReadDocuments([]Document{{Name: "x.yaml", Data: []byte(seq(`{uri: "relative"}`))}}, WithPrevious(first))
		if err != nil {
			t.Fatal(err)
		}
		o := status(t, second, "Sequence shop/s")
		if o.Ready || len(o.FlowChannels) != 1 || o.FlowChannels[0].Name != "s-kn-sequence-0" {
			t.Errorf("an invalid edit: %+v", o)
		}
	})
}
