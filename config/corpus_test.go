package config

import (
	"maps"
	"path/filepath"
	"testing"
	"time"
)

// The corpus of real Knative manifests (test/testdata/knative; each file names its
// source) read here for what `sluice validate` does not print: the Kafka settings a
// ConfigMap carries and the channels and subscriptions a Sequence becomes.
func corpus(p string) string { return filepath.Join("..", "test", "testdata", "knative", p) }

func readCorpus(t *testing.T, paths ...string) *Config {
	t.Helper()
	var full []string
	for _, p := range paths {
		full = append(full, corpus(p))
	}
	cfg, err := Read(full, WithIngressURL("http://sluice:8080"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func brokerByKey(t *testing.T, cfg *Config, key string) Broker {
	t.Helper()
	for _, b := range cfg.Brokers {
		if b.Key() == key {
			return b
		}
	}
	t.Fatalf("no broker %s in %+v (objects %+v)", key, cfg.Brokers, cfg.Objects)
	return Broker{}
}

func TestCorpusKafkaBroker(t *testing.T) {
	kafkaCM := Settings{"data.bootstrap.servers": "my-cluster-kafka-bootstrap.kafka:9092",
		"data.default.topic.partitions": "10", "data.default.topic.replication.factor": "3"}
	tests := []struct {
		paths    []string
		key      string
		class    string
		settings Settings
	}{
		// Knative's stock kafka-broker-config, not in the configuration: --kafka-brokers and
		// the kafka channel's defaults.
		{[]string{"kafka-broker"}, "default/default", "Kafka", nil},
		// The ConfigMap given: its bootstrap servers and topic settings.
		{[]string{"kafka-broker", "kafka-broker-configmap"}, "default/default", "Kafka", kafkaCM},
		{[]string{"kafka-broker", "eventing-kafka-broker/100-kafka-broker-configmap.yaml"}, "default/default", "Kafka", kafkaCM},
		// An MTChannelBasedBroker whose ConfigMap's template is a KafkaChannel.
		{[]string{"kafka-channel-broker"}, "default/kafka-backed-broker", "MTChannelBasedBroker",
			Settings{"spec.numPartitions": "3", "spec.replicationFactor": "1"}},
		// The KafkaNamespaced class reads the ConfigMap of its namespace as Kafka does.
		{[]string{"kafka-namespaced"}, "default/broker-isolated-data-plane", "KafkaNamespaced",
			Settings{"data.bootstrap.servers": "my-cluster-kafka-bootstrap.kafka:9092",
				"data.default.topic.partitions": "10", "data.default.topic.replication.factor": "1"}},
		// config-br-defaults makes a Broker without a class a Kafka broker.
		{[]string{"kafka-default-class", "meteatamel/broker.yaml"}, "default/default", "Kafka", nil},
	}
	for _, tt := range tests {
		cfg := readCorpus(t, tt.paths...)
		b := brokerByKey(t, cfg, tt.key)
		if b.Channel != ChannelKafka || b.Class != tt.class || !maps.Equal(b.Settings, tt.settings) {
			t.Errorf("%v: %+v", tt.paths, b)
		}
	}
}

func TestCorpusSequenceLowered(t *testing.T) {
	cfg := readCorpus(t, "bookstore")
	s0 := brokerByKey(t, cfg, "default/sequence-kn-sequence-0")
	s1 := brokerByKey(t, cfg, "default/sequence-kn-sequence-1")
	if s0.Owner != "Sequence default/sequence" || s0.Channel != ChannelMemory || len(s0.Triggers) != 1 || len(s1.Triggers) != 1 {
		t.Fatalf("channels %+v %+v", s0, s1)
	}
	if tr := s0.Triggers[0]; tr.Subscriber != "http://bad-word-filter.default.svc.cluster.local" || tr.Reply != "http://sluice:8080/default/sequence-kn-sequence-1" {
		t.Errorf("step 0: %+v", tr)
	}
	if tr := s1.Triggers[0]; tr.Subscriber != "http://sentiment-analysis-app.default.svc.cluster.local" || tr.Reply != "http://sluice:8080/default/bookstore-broker" {
		t.Errorf("step 1: %+v", tr)
	}
	b := brokerByKey(t, cfg, "default/bookstore-broker")
	for _, tr := range b.Triggers {
		if tr.Name == "sequence-trigger" && tr.Subscriber != "http://sluice:8080/default/sequence-kn-sequence-0" {
			t.Errorf("trigger to the sequence: %+v", tr)
		}
	}
}

func TestCorpusParallelLowered(t *testing.T) {
	cfg := readCorpus(t, "parallel-multiple-branches")
	in := brokerByKey(t, cfg, "default/odd-even-parallel-kn-parallel")
	if len(in.Triggers) != 2 {
		t.Fatalf("ingress channel %+v", in)
	}
	f := in.Triggers[0]
	if f.Name != "odd-even-parallel-kn-parallel-filter-0" || f.Subscriber != "http://even-filter.default.svc.cluster.local" ||
		f.Reply != "http://sluice:8080/default/odd-even-parallel-kn-parallel-0" {
		t.Errorf("filter subscription %+v", f)
	}
	br := brokerByKey(t, cfg, "default/odd-even-parallel-kn-parallel-1")
	if s := br.Triggers[0]; s.Subscriber != "http://odd-transformer.default.svc.cluster.local" || s.Reply != "http://event-display.default.svc.cluster.local" {
		t.Errorf("branch subscription %+v", s)
	}
}

// TestCorpusBrokerDefaultsDelivery: the delivery defaults of Knative's broker
// configuration docs are the delivery of a Broker without spec.delivery, and so of its
// triggers.
func TestCorpusBrokerDefaultsDelivery(t *testing.T) {
	cfg := readCorpus(t, "br-defaults-delivery", "meteatamel/broker.yaml", "meteatamel/brokertrigger-trigger1.yaml",
		"stock-config/kafka-channel-configmap.yaml")
	b := brokerByKey(t, cfg, "default/default")
	if len(b.Triggers) != 1 {
		t.Fatalf("broker %+v", b)
	}
	want := DefaultDelivery()
	want.Retry, want.BackoffPolicy, want.BackoffDelay = 10, BackoffExponential, 200*time.Millisecond
	if d := b.Triggers[0].Delivery; d != want {
		t.Errorf("delivery %v, want %v", d, want)
	}
}

// TestCorpusNatsChannel: eventing-natss's NatsJetStreamChannel examples run on the
// jetstream channel; the ping demo's Subscription is the channel's trigger.
func TestCorpusNatsChannel(t *testing.T) {
	cfg := readCorpus(t, "nats-channel")
	c := brokerByKey(t, cfg, "default/my-default-channel")
	if c.Kind != "NatsJetStreamChannel" || c.Channel != ChannelJetStream || len(c.Triggers) != 1 ||
		c.Triggers[0].Delivery.DeadLetterSink != "http://dead-letter-display.default.svc.cluster.local" {
		t.Errorf("channel %+v", c)
	}
	if p := cfg.PingSources; len(p) != 1 || p[0].Sink != "http://sluice:8080/default/my-default-channel" {
		t.Errorf("ping sources %+v", p)
	}
}

// TestCorpusRabbitMQBroker: eventing-rabbitmq's samples run on the rabbitmq channel with
// their RabbitmqBrokerConfig's queue type (a RabbitmqCluster: the defaults), and their
// triggers keep their filters and delivery; rabbitmq.eventing.knative.dev/parallelism is
// their in-flight cap.
func TestCorpusRabbitMQBroker(t *testing.T) {
	pingType := map[string]string{"type": "dev.knative.sources.ping"}
	tests := []struct {
		paths    []string
		key      string
		settings Settings
		triggers map[string]map[string]string // trigger name → its spec.filter.attributes
		delivery Delivery                     // of the first trigger
		inFlight map[string]int               // trigger name → its in-flight cap (0: none)
	}{
		{[]string{"rabbitmq-broker"}, "quick-setup-sample/default", Settings{"spec.queueType": "quorum"},
			map[string]map[string]string{"failer-trigger": pingType},
			func() Delivery {
				d := DefaultDelivery()
				d.DeadLetterSink = "http://event-display.quick-setup-sample.svc.cluster.local"
				return d
			}(), map[string]int{"failer-trigger": 10}},
		// The Trigger's retry and backoff, the Broker's dead-letter sink.
		{[]string{"rabbitmq-retry"}, "retry-config-sample/default", Settings{"spec.queueType": "quorum"},
			map[string]map[string]string{"failer-trigger": pingType},
			func() Delivery {
				d := DefaultDelivery()
				d.Retry, d.BackoffPolicy, d.BackoffDelay = 4, BackoffLinear, 200*time.Millisecond
				d.DeadLetterSink = "http://event-display.retry-config-sample.svc.cluster.local"
				return d
			}(), map[string]int{"failer-trigger": 10}},
		{[]string{"rabbitmq-external"}, "external-cluster-sample/default", Settings{"spec.queueType": "quorum"}, nil, Delivery{}, nil},
		{[]string{"rabbitmq-trigger-customizations"}, "trigger-customizations-sample/default", nil,
			map[string]map[string]string{"fifo-trigger": nil, "high-throughput-trigger": nil}, DefaultDelivery(),
			map[string]int{"high-throughput-trigger": 10}},
		{[]string{"rabbitmq-cluster"}, "ping/ping-broker-rabbitmq", nil,
			map[string]map[string]string{"ping-cloudevents-player-trigger-rabbitmq": nil}, DefaultDelivery(), nil},
	}
	for _, tt := range tests {
		cfg := readCorpus(t, tt.paths...)
		b := brokerByKey(t, cfg, tt.key)
		if b.Channel != ChannelRabbitMQ || b.Class != "RabbitMQBroker" || !maps.Equal(b.Settings, tt.settings) {
			t.Errorf("%v: broker %+v", tt.paths, b)
		}
		if len(b.Triggers) != len(tt.triggers) {
			t.Fatalf("%v: triggers %+v, want %v", tt.paths, b.Triggers, tt.triggers)
		}
		for i, tr := range b.Triggers {
			attrs, ok := tt.triggers[tr.Name]
			if !ok || !maps.Equal(tr.Attributes, attrs) || len(tr.Filters) != 0 {
				t.Errorf("%v: trigger %s: filter %v %v, want %v", tt.paths, tr.Name, tr.Attributes, tr.Filters, attrs)
			}
			if tr.Caps != (Caps{InFlight: tt.inFlight[tr.Name]}) {
				t.Errorf("%v: trigger %s: caps %+v, want in flight %d", tt.paths, tr.Name, tr.Caps, tt.inFlight[tr.Name])
			}
			if i == 0 && tr.Delivery != tt.delivery {
				t.Errorf("%v: trigger %s: delivery %+v, want %+v", tt.paths, tr.Name, tr.Delivery, tt.delivery)
			}
		}
	}
}
