package registry

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/config"
)

// TestOpenChecksSettings: a broker's settings (config.Settings, unparsed by config) are
// parsed and checked by its backend before anything is opened, and a bad one is an
// error naming its key, whether or not the backend's flags configure it.
func TestOpenChecksSettings(t *testing.T) {
	r, err := started(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, backend string
		settings      config.Settings
		want          string
	}{
		{"memory reads none", config.ChannelMemory, config.Settings{"spec.numPartitions": "2"},
			"the memory channel's settings: spec.numPartitions: not read by this backend"},
		{"default reads none", config.ChannelDefault, config.Settings{"data.x": "1"},
			"the memory channel's settings: data.x: not read by this backend"},
		{"jetstream reads none", config.ChannelJetStream, config.Settings{keyKinesisStream: "s"},
			"the jetstream channel's settings: metadata.annotations.sluice.dev/kinesis-stream: not read by this backend"},
		{"kinesis reads no partitions", config.ChannelKinesis, config.Settings{keyKinesisStream: "s", "spec.numPartitions": "2"},
			"the kinesis channel's settings: spec.numPartitions: not read by this backend"},
		{"kafka unknown key", config.ChannelKafka, config.Settings{"data.auth.secret.ref.name": "s"},
			"the kafka channel's settings: data.auth.secret.ref.name: not read by this backend"},
		{"kafka zero partitions", config.ChannelKafka, config.Settings{keyCMPartitions: "0"},
			`the kafka channel's settings: data.default.topic.partitions: "0" is not an integer from 1 to 2147483647`},
		{"kafka partitions past int32", config.ChannelKafka, config.Settings{keySpecPartitions: "3000000000"},
			`spec.numPartitions: "3000000000" is not an integer from 1 to 2147483647`},
		{"kafka replication past int16", config.ChannelKafka, config.Settings{keySpecReplication: "40000"},
			`spec.replicationFactor: "40000" is not an integer from 1 to 32767`},
		{"kafka replication not a number", config.ChannelKafka, config.Settings{keyCMReplication: "three"},
			`data.default.topic.replication.factor: "three" is not an integer from 1 to 32767`},
		{"jetstream unknown key", config.ChannelJetStream, config.Settings{"spec.stream.config.maxAge": "1h"},
			"the jetstream channel's settings: spec.stream.config.maxAge: not read by this backend"},
		{"jetstream maxBytes not a number", config.ChannelJetStream, config.Settings{"spec.stream.config.maxBytes": "lots"},
			`the jetstream channel's settings: spec.stream.config.maxBytes: "lots" is not a positive number of bytes`},
		{"jetstream replicas past 5", config.ChannelJetStream, config.Settings{"spec.stream.config.replicas": "7"},
			`spec.stream.config.replicas: "7" is not a number of replicas from 1 to 5`},
		{"jetstream replicas on the embedded server", config.ChannelJetStream, config.Settings{"spec.stream.config.replicas": "3"},
			"spec.stream.config.replicas: 3: the embedded NATS server is one node; replicas above 1 need --nats-url"},
		// Valid settings get as far as the missing flag.
		{"jetstream valid", config.ChannelJetStream, config.Settings{"spec.stream.config.maxBytes": "1000", "spec.stream.config.replicas": "1"},
			"the jetstream channel needs --data-dir"},
		{"kafka valid", config.ChannelKafka, config.Settings{keyCMPartitions: "3", keyExternalTopic: "t"},
			"the kafka channel needs --kafka-brokers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := broker("x", tt.backend)
			b.Settings = tt.settings
			ch, err := r.Open(context.Background(), b)
			if err == nil {
				ch.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestParseKafka: what a Kafka broker's ConfigMap, a KafkaChannel's spec and the
// external topic annotation give the kafka backend.
func TestParseKafka(t *testing.T) {
	tests := []struct {
		name string
		in   config.Settings
		want kafkaSettings
	}{
		{"none", nil, kafkaSettings{}},
		{"configmap", config.Settings{keyBootstrapServers: " k1:9092, ,k2:9092 ", keyCMPartitions: " 10", keyCMReplication: "3"},
			kafkaSettings{seeds: []string{"k1:9092", "k2:9092"}, parts: 10, rf: 3}},
		{"kafkachannel", config.Settings{keySpecPartitions: "2", keySpecReplication: "1"}, kafkaSettings{parts: 2, rf: 1}},
		{"external topic", config.Settings{keyExternalTopic: "orders"}, kafkaSettings{topic: "orders"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKafka(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.seeds, tt.want.seeds) || got.parts != tt.want.parts || got.rf != tt.want.rf || got.topic != tt.want.topic {
				t.Errorf("parseKafka(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestParseKafkaErrors: a bad number names its key and the limit, and keeps the
// parse error (errors.As finds the *strconv.NumError).
func TestParseKafkaErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      config.Settings
		want    string
		numeric bool // the error wraps a *strconv.NumError
	}{
		{"not a number", config.Settings{keyCMPartitions: "ten"}, keyCMPartitions + `: "ten" is not an integer from 1 to 2147483647`, true},
		{"too large for int", config.Settings{keySpecReplication: "99999999999999999999"}, keySpecReplication + `: "99999999999999999999" is not an integer from 1 to 32767`, true},
		{"zero", config.Settings{keySpecPartitions: "0"}, keySpecPartitions + `: "0" is not an integer from 1 to 2147483647`, false},
		{"past int16", config.Settings{keyCMReplication: "40000"}, keyCMReplication + `: "40000" is not an integer from 1 to 32767`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseKafka(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			var ne *strconv.NumError
			if got := errors.As(err, &ne); got != tt.numeric {
				t.Fatalf("errors.As(%v, *strconv.NumError) = %v, want %v", err, got, tt.numeric)
			}
		})
	}
}

// FuzzParseKafka: any text in a Kafka broker's settings is parsed or refused with an
// error naming its key, never wrapped into a negative int32 or int16 for the client.
func FuzzParseKafka(f *testing.F) {
	f.Add("k1:9092, k2:9092", "10", "3", "t")
	f.Add("", "0", "-1", "")
	f.Add(",,,", "3000000000", "40000", "x")
	f.Add("a", " 7 ", "+2", "")
	f.Fuzz(func(t *testing.T, servers, parts, rf, topic string) {
		in := config.Settings{keyBootstrapServers: servers, keyCMPartitions: parts, keySpecReplication: rf, keyExternalTopic: topic}
		s, err := parseKafka(in)
		if err != nil {
			if !strings.Contains(err.Error(), keyCMPartitions) && !strings.Contains(err.Error(), keySpecReplication) {
				t.Fatalf("error %q names no key", err)
			}
			return
		}
		if s.parts < 1 || s.parts > math.MaxInt32 || s.rf < 1 || s.rf > math.MaxInt16 {
			t.Fatalf("parsed %+v out of range", s)
		}
		for _, seed := range s.seeds {
			if seed == "" || strings.TrimSpace(seed) != seed {
				t.Fatalf("seed %q", seed)
			}
		}
	})
}

// TestParseJetStream: what a NatsJetStreamChannel's or NatsJetStreamBroker's stream
// config gives the jetstream backend, wherever it was written.
func TestParseJetStream(t *testing.T) {
	for _, tt := range []struct {
		name     string
		in       config.Settings
		external bool
		want     jetstreamSettings
	}{
		{"none", nil, false, jetstreamSettings{}},
		{"channel", config.Settings{"spec.stream.config.maxBytes": "4096", "spec.stream.config.replicas": "1"}, false, jetstreamSettings{maxBytes: 4096, replicas: 1}},
		{"broker annotation", config.Settings{"metadata.annotations.natsjetstream.eventing.knative.dev/config.stream.maxBytes": " 10 "}, false, jetstreamSettings{maxBytes: 10}},
		{"cluster replicas", config.Settings{"ConfigMap shop/natsjetstream-broker-config: data.config.clusterDefault.stream.replicas": "3"}, true, jetstreamSettings{replicas: 3}},
	} {
		got, err := parseJetStream(tt.in, tt.external)
		if err != nil || got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// FuzzParseJetStream: any text in a jetstream broker's stream settings is parsed into a
// positive byte bound and 1 to 5 replicas (1 without --nats-url), or refused with an
// error naming its key.
func FuzzParseJetStream(f *testing.F) {
	f.Add("4096", "1", false)
	f.Add("-1", "3", true)
	f.Add("99999999999999999999", "0", false)
	f.Add(" 7 ", "+2", true)
	f.Fuzz(func(t *testing.T, maxBytes, replicas string, external bool) {
		const kb, kr = "spec.stream.config.maxBytes", "spec.stream.config.replicas"
		s, err := parseJetStream(config.Settings{kb: maxBytes, kr: replicas}, external)
		if err != nil {
			if !strings.HasPrefix(err.Error(), kb+": ") && !strings.HasPrefix(err.Error(), kr+": ") {
				t.Fatalf("error %q names no key", err)
			}
			return
		}
		if s.maxBytes < 1 || s.replicas < 1 || s.replicas > 5 || (!external && s.replicas > 1) {
			t.Fatalf("parsed %+v out of range (external %v)", s, external)
		}
	})
}
