package config

import (
	"maps"
	"strings"
	"testing"
)

// TestMoreClasses: the NatsJetStreamBroker class and the NatsJetStreamChannel kind run
// on the jetstream channel with their stream's maxBytes and replicas, KafkaNamespaced
// on the kafka channel like Kafka; a class whose events live in a cloud service is
// refused naming the class, and every setting that is not honoured names its field.
func TestMoreClasses(t *testing.T) {
	const nats = "eventing.knative.dev/broker.class: NatsJetStreamBroker"
	broker := func(name, ann, spec string) string {
		return "---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata:\n  name: " + name + "\n  namespace: shop\n  annotations: {" + ann + "}\n" + spec
	}
	cm := func(ns, name, data string) string {
		return "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: " + ns + "}\ndata:\n" + data
	}
	natsCh := func(name, spec string) string {
		return "---\napiVersion: messaging.knative.dev/v1alpha1\nkind: NatsJetStreamChannel\nmetadata: {name: " + name + ", namespace: shop}\n" + spec
	}
	tests := []struct {
		name     string
		yaml     string
		key      string // the object asserted
		channel  string
		class    string
		settings Settings
		notReady string // a fragment of the reason; "" means ready
	}{
		{name: "NatsJetStreamBroker", yaml: broker("b", nats, ""), key: "Broker shop/b", channel: ChannelJetStream, class: classNatsJetStream},
		{name: "NatsJetStreamBroker reads no spec.config, as eventing-natss",
			yaml: broker("b", nats, "spec: {config: {apiVersion: v1, kind: ConfigMap, name: config-br-default-channel, namespace: knative-eventing}}\n"),
			key:  "Broker shop/b", channel: ChannelJetStream, class: classNatsJetStream},
		{name: "NatsJetStreamBroker config annotation",
			yaml: broker("b", nats+`, natsjetstream.eventing.knative.dev/config: '{"stream": {"maxBytes": 1000, "replicas": 1, "storage": "File"}}'`, ""),
			key:  "Broker shop/b", channel: ChannelJetStream, class: classNatsJetStream,
			settings: Settings{"metadata.annotations.natsjetstream.eventing.knative.dev/config.stream.maxBytes": "1000",
				"metadata.annotations.natsjetstream.eventing.knative.dev/config.stream.replicas": "1"}},
		{name: "NatsJetStreamBroker namespace's ConfigMap, its namespaceDefaults first",
			yaml: broker("b", nats, "") + cm("shop", "natsjetstream-broker-config", "  config: |\n    clusterDefault: {stream: {maxBytes: 1}}\n    namespaceDefaults:\n      shop: {stream: {maxBytes: 2048}}\n"),
			key:  "Broker shop/b", channel: ChannelJetStream, class: classNatsJetStream,
			settings: Settings{"ConfigMap shop/natsjetstream-broker-config: data.config.namespaceDefaults.shop.stream.maxBytes": "2048"}},
		{name: "the annotation wins over the ConfigMap",
			yaml: broker("b", nats+`, natsjetstream.eventing.knative.dev/config: '{}'`, "") + cm("shop", "natsjetstream-broker-config", "  config: |\n    clusterDefault: {stream: {maxBytes: 1}}\n"),
			key:  "Broker shop/b", channel: ChannelJetStream, class: classNatsJetStream},
		{name: "NatsJetStreamBroker deployment settings refused",
			yaml:     broker("b", nats+`, natsjetstream.eventing.knative.dev/config: '{"filter": {"replicas": 2}}'`, ""),
			key:      "Broker shop/b",
			notReady: "metadata.annotations.natsjetstream.eventing.knative.dev/config.filter: supported by Knative, not by Sluice: the settings of a Kubernetes Deployment"},
		{name: "NatsJetStreamBroker stream retention refused",
			yaml:     broker("b", nats, "") + cm("shop", "natsjetstream-broker-config", "  config: |\n    clusterDefault: {stream: {retention: Limits}}\n"),
			key:      "Broker shop/b",
			notReady: "ConfigMap shop/natsjetstream-broker-config: data.config.clusterDefault.stream.retention: supported by Knative, not by Sluice"},
		{name: "NatsJetStreamBroker memory storage refused",
			yaml:     broker("b", nats+`, natsjetstream.eventing.knative.dev/config: '{"stream": {"storage": "Memory"}}'`, ""),
			key:      "Broker shop/b",
			notReady: `natsjetstream.eventing.knative.dev/config.stream.storage: "Memory": supported by Knative, not by Sluice`},
		{name: "NatsJetStreamBroker config annotation not JSON",
			yaml:     broker("b", nats+`, natsjetstream.eventing.knative.dev/config: '{"stream": ['`, ""),
			key:      "Broker shop/b",
			notReady: "metadata.annotations.natsjetstream.eventing.knative.dev/config: not JSON"},
		{name: "NatsJetStreamBroker config annotation that expands past the bound",
			yaml:     broker("b", nats+`, natsjetstream.eventing.knative.dev/config: '{a: &a "`+strings.Repeat("x", 64<<10)+`", b: [`+strings.Repeat("*a, ", 20)+`*a]}'`, ""),
			key:      "Broker shop/b",
			notReady: "metadata.annotations.natsjetstream.eventing.knative.dev/config: expands to more than 1 MiB with its YAML aliases (config.MaxEmbeddedYAMLBytes)"},
		{name: "the NATS config annotation on another class",
			yaml:     broker("b", `eventing.knative.dev/broker.class: Kafka, natsjetstream.eventing.knative.dev/config: '{}'`, ""),
			key:      "Broker shop/b",
			notReady: "metadata.annotations.natsjetstream.eventing.knative.dev/config: only for a broker of class NatsJetStreamBroker"},
		{name: "NatsJetStreamBroker against sluice.dev/channel",
			yaml:     broker("b", nats+", sluice.dev/channel: memory", ""),
			key:      "Broker shop/b",
			notReady: `metadata.annotations.sluice.dev/channel: "memory" conflicts with the jetstream backend that broker class NatsJetStreamBroker means`},
		{name: "KafkaNamespaced",
			yaml: broker("b", "eventing.knative.dev/broker.class: KafkaNamespaced", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: kafka}}\n") +
				cm("shop", "kafka", "  bootstrap.servers: k:9092\n  default.topic.partitions: \"3\"\n"),
			key: "Broker shop/b", channel: ChannelKafka, class: classKafkaNamespaced,
			settings: Settings{"data.bootstrap.servers": "k:9092", "data.default.topic.partitions": "3"}},
		{name: "KafkaNamespaced's ConfigMap in another namespace",
			yaml: broker("b", "eventing.knative.dev/broker.class: KafkaNamespaced", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: kafka-broker-config, namespace: knative-eventing}}\n"),
			key:  "Broker shop/b", notReady: `spec.config.namespace: "knative-eventing": a KafkaNamespaced broker's ConfigMap must be in the Broker's namespace (shop)`},
		{name: "KafkaNamespaced with an external topic",
			yaml: broker("b", "eventing.knative.dev/broker.class: KafkaNamespaced, kafka.eventing.knative.dev/external.topic: orders", ""),
			key:  "Broker shop/b", channel: ChannelKafka, class: classKafkaNamespaced,
			settings: Settings{"metadata.annotations.kafka.eventing.knative.dev/external.topic": "orders"}},
		{name: "googlecloud refused naming the class",
			yaml: broker("b", "eventing.knative.dev/broker.class: googlecloud", ""), key: "Broker shop/b",
			notReady: `metadata.annotations.eventing.knative.dev/broker.class: "googlecloud" is not a broker class Sluice runs (Sluice, MTChannelBasedBroker, Kafka, KafkaNamespaced, NatsJetStreamBroker, RabbitMQBroker): its events live in Google Cloud Pub/Sub, which Sluice does not run`},
		{name: "an AWS SQS class refused naming the class",
			yaml: broker("b", "eventing.knative.dev/broker.class: AWSSQSBroker", ""), key: "Broker shop/b",
			notReady: `"AWSSQSBroker" is not a broker class Sluice runs (Sluice, MTChannelBasedBroker, Kafka, KafkaNamespaced, NatsJetStreamBroker, RabbitMQBroker): its events live in AWS SQS`},
		{name: "config-br-defaults' brokerClasses refused naming the field",
			yaml:     broker("b", "", "") + cm("knative-eventing", "config-br-defaults", "  default-br-config: |\n    clusterDefault: {brokerClass: MTChannelBasedBroker}\n    namespaceDefaults:\n      shop: {brokerClasses: {Kafka: {name: k}}}\n"),
			key:      "Broker shop/b",
			notReady: "ConfigMap knative-eventing/config-br-defaults: data.default-br-config.namespaceDefaults.shop.brokerClasses: supported by Knative, not by Sluice"},
		{name: "NatsJetStreamChannel",
			yaml: natsCh("c", "spec: {stream: {config: {maxBytes: 4096, replicas: 1}}}\n"), key: "NatsJetStreamChannel shop/c", channel: ChannelJetStream,
			settings: Settings{"spec.stream.config.maxBytes": "4096", "spec.stream.config.replicas": "1"}},
		{name: "NatsJetStreamChannel consumer template refused",
			yaml: natsCh("c", "spec: {consumerConfigTemplate: {deliverPolicy: New}, stream: {overrideName: s}}\n"), key: "NatsJetStreamChannel shop/c",
			notReady: "spec.consumerConfigTemplate: supported by Knative, not by Sluice"},
		{name: "NatsJetStreamChannel stream name refused",
			yaml: natsCh("c", "spec: {stream: {overrideName: s}}\n"), key: "NatsJetStreamChannel shop/c",
			notReady: "spec.stream.overrideName: supported by Knative, not by Sluice"},
		{name: "NatsJetStreamChannel unknown field",
			yaml: natsCh("c", "spec: {stream: {config: {maxbytes: 1}}}\n"), key: "NatsJetStreamChannel shop/c",
			notReady: "spec.stream.config.maxbytes: unknown field"},
		{name: "NatsJetStreamChannel against sluice.dev/channel",
			yaml: "---\napiVersion: messaging.knative.dev/v1alpha1\nkind: NatsJetStreamChannel\nmetadata: {name: c, namespace: shop, annotations: {sluice.dev/channel: kafka}}\n", key: "NatsJetStreamChannel shop/c",
			notReady: `metadata.annotations.sluice.dev/channel: "kafka" conflicts with the jetstream backend of a NatsJetStreamChannel`},
		{name: "an MTChannelBasedBroker on a NatsJetStreamChannel template",
			yaml: broker("b", "", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: jsm}}\n") +
				cm("shop", "jsm", "  channelTemplateSpec: |\n    apiVersion: messaging.knative.dev/v1alpha1\n    kind: NatsJetStreamChannel\n    spec: {stream: {config: {maxBytes: 100}}}\n"),
			key: "Broker shop/b", channel: ChannelJetStream, class: classMTChannel, settings: Settings{"spec.stream.config.maxBytes": "100"}},
		{name: "a template's NATS stream retention refused",
			yaml: broker("b", "", "spec: {config: {apiVersion: v1, kind: ConfigMap, name: jsm}}\n") +
				cm("shop", "jsm", "  channelTemplateSpec: |\n    apiVersion: messaging.knative.dev/v1alpha1\n    kind: NatsJetStreamChannel\n    spec: {stream: {config: {retention: Limits}}}\n"),
			key:      "Broker shop/b",
			notReady: "spec.config: ConfigMap jsm: data.channelTemplateSpec.spec.stream.config.retention: supported by Knative, not by Sluice"},
		{name: "a Channel defaulted to NatsJetStreamChannel by default-ch-webhook",
			yaml: "---\napiVersion: messaging.knative.dev/v1\nkind: Channel\nmetadata: {name: c, namespace: shop}\n" +
				cm("knative-eventing", "default-ch-webhook", "  default-ch-config: |\n    clusterDefault: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatsJetStreamChannel, spec: {stream: {config: {replicas: 1}}}}\n"),
			key: "Channel shop/c", channel: ChannelJetStream, settings: Settings{"spec.stream.config.replicas": "1"}},
		{name: "a Channel's template NatsJetStreamChannel",
			yaml: "---\napiVersion: messaging.knative.dev/v1\nkind: Channel\nmetadata: {name: c, namespace: shop}\nspec: {channelTemplate: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatsJetStreamChannel}}\n",
			key:  "Channel shop/c", channel: ChannelJetStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := readYAML(t, tt.yaml)
			o := status(t, cfg, tt.key)
			if tt.notReady != "" {
				if o.Ready || !strings.Contains(o.Reason, tt.notReady) {
					t.Fatalf("ready %v, reason %q; want not ready with %q", o.Ready, o.Reason, tt.notReady)
				}
				return
			}
			if !o.Ready {
				t.Fatalf("not ready: %s", o.Reason)
			}
			_, name, _ := strings.Cut(tt.key, " ")
			var b *Broker
			for i := range cfg.Brokers {
				if cfg.Brokers[i].Key() == name {
					b = &cfg.Brokers[i]
				}
			}
			if b == nil {
				t.Fatalf("no broker %s", name)
			}
			if b.Channel != tt.channel || b.Class != tt.class || !maps.Equal(b.Settings, tt.settings) {
				t.Errorf("channel %q class %q settings %v; want %q %q %v", b.Channel, b.Class, b.Settings, tt.channel, tt.class, tt.settings)
			}
		})
	}
}

// TestNatsJetStreamChannelNamed: a PingSource's sink and a Subscription naming a
// NatsJetStreamChannel reach it at its Sluice address: it runs, never skipped.
func TestNatsJetStreamChannelNamed(t *testing.T) {
	cfg := readYAML(t, `apiVersion: messaging.knative.dev/v1alpha1
kind: NatsJetStreamChannel
metadata: {name: my-default-channel, namespace: default}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: ping, namespace: default}
spec:
  sink: {ref: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatsJetStreamChannel, name: my-default-channel}}
---
apiVersion: messaging.knative.dev/v1
kind: Subscription
metadata: {name: subscription, namespace: default}
spec:
  channel: {apiVersion: messaging.knative.dev/v1alpha1, kind: NatsJetStreamChannel, name: my-default-channel}
  subscriber: {uri: "http://127.0.0.1:9/"}
`, WithIngressURL("http://sluice:8080"))
	if !cfg.Ready() {
		t.Fatal(cfg.Err())
	}
	ch := status(t, cfg, "NatsJetStreamChannel default/my-default-channel")
	if ch.Skipped || ch.Channel != ChannelJetStream {
		t.Errorf("channel %+v", ch)
	}
	if u, via := refURL(status(t, cfg, "PingSource default/ping"), "spec.sink"); u != "http://sluice:8080/default/my-default-channel" || via != ViaConfig {
		t.Errorf("ping sink %q via %q", u, via)
	}
	if len(cfg.Brokers) != 1 || len(cfg.Brokers[0].Triggers) != 1 || cfg.Brokers[0].Triggers[0].Subscriber != "http://127.0.0.1:9/" {
		t.Errorf("brokers %+v", cfg.Brokers)
	}
}
