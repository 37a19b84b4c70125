package config

import (
	"maps"
	"testing"
)

// TestBrokerSettings: what a backend reads of an object reaches Broker.Settings
// unparsed, keyed by the field it was written in, on every kind that carries it; and
// nothing else does.
func TestBrokerSettings(t *testing.T) {
	const stream = "metadata.annotations.sluice.dev/kinesis-stream"
	tests := []struct {
		name, yaml, key string
		want            Settings
	}{
		{"kinesis broker", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, annotations: {sluice.dev/channel: kinesis, sluice.dev/kinesis-stream: orders}}\n",
			"default/b", Settings{stream: "orders"}},
		{"kinesis channel", "apiVersion: messaging.knative.dev/v1\nkind: Channel\nmetadata: {name: c, annotations: {sluice.dev/channel: kinesis, sluice.dev/kinesis-stream: orders}}\n",
			"default/c", Settings{stream: "orders"}},
		{"kinesis sequence", "apiVersion: flows.knative.dev/v1\nkind: Sequence\nmetadata: {name: s, annotations: {sluice.dev/channel: kinesis, sluice.dev/kinesis-stream: orders}}\nspec: {steps: [{uri: \"http://127.0.0.1:1/\"}]}\n",
			"default/s-kn-sequence-0", Settings{stream: "orders"}},
		{"kafka external topic", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: k, annotations: {eventing.knative.dev/broker.class: Kafka, kafka.eventing.knative.dev/external.topic: t}}\n",
			"default/k", Settings{"metadata.annotations.kafka.eventing.knative.dev/external.topic": "t"}},
		{"kafkachannel", "apiVersion: messaging.knative.dev/v1beta1\nkind: KafkaChannel\nmetadata: {name: kc}\nspec: {numPartitions: 3}\n",
			"default/kc", Settings{"spec.numPartitions": "3"}},
		{"memory broker", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: m, annotations: {sluice.dev/channel: memory, sluice.dev/max-rate: \"5\"}}\n",
			"default/m", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := readYAML(t, tt.yaml)
			if err := cfg.Err(); err != nil {
				t.Fatal(err)
			}
			for _, b := range cfg.Brokers {
				if b.Key() == tt.key {
					if !maps.Equal(b.Settings, tt.want) {
						t.Errorf("Settings %v, want %v", b.Settings, tt.want)
					}
					return
				}
			}
			t.Fatalf("no broker %s in %+v", tt.key, cfg.Brokers)
		})
	}
}
