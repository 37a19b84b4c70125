package registry

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/config"
)

// kafkaBackend opens one topic per broker on the cluster at --kafka-brokers; each
// channel has its own client.
type kafkaBackend struct {
	brokers     string
	partitions  int
	replication int
	minInsync   int

	seeds []string
	log   *slog.Logger
	reg   prometheus.Registerer
}

// newKafkaBackend returns the backend with its defaults, which hold when its flags are
// not registered too.
func newKafkaBackend() *kafkaBackend {
	return &kafkaBackend{partitions: kafka.DefaultPartitions, replication: kafka.DefaultReplicationFactor}
}

func (k *kafkaBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&k.brokers, "kafka-brokers", "", "comma-separated host:port seed brokers for the kafka channel")
	fs.IntVar(&k.partitions, "kafka-partitions", k.partitions, "partitions of a topic the kafka channel creates, unless its KafkaChannel or ConfigMap (default.topic.partitions) says; they bound how many replicas share a trigger")
	fs.IntVar(&k.replication, "kafka-replication-factor", k.replication, "replication factor of a topic the kafka channel creates, unless its KafkaChannel or ConfigMap (default.topic.replication.factor) says (0: the cluster's default.replication.factor)")
	fs.IntVar(&k.minInsync, "kafka-min-insync-replicas", 0, "min.insync.replicas of the topics Sluice creates (0: 2 on topics of 3 or more replicas, else the cluster's default); with acks=all, 2 of 3 replicas means a 202 survives losing one broker")
}

// The settings (config.Settings) the kafka backend reads: a Kafka broker's ConfigMap
// keys, a KafkaChannel's spec fields (also from a channel template), and the external
// topic annotation.
const (
	keyBootstrapServers = "data.bootstrap.servers"
	keyCMPartitions     = "data.default.topic.partitions"
	keyCMReplication    = "data.default.topic.replication.factor"
	keySpecPartitions   = "spec.numPartitions"
	keySpecReplication  = "spec.replicationFactor"
	keyExternalTopic    = "metadata.annotations.kafka.eventing.knative.dev/external.topic"
)

// kafkaSettings are a broker's settings parsed; zero values are the flags' defaults.
type kafkaSettings struct {
	seeds     []string // the cluster the broker's ConfigMap names
	parts, rf int
	topic     string // an existing topic, used as it is
}

// parseKafka parses and validates the settings of a kafka broker; errors name the key.
func parseKafka(s config.Settings) (kafkaSettings, error) {
	var out kafkaSettings
	if err := onlyKeys(s, keyBootstrapServers, keyCMPartitions, keyCMReplication, keySpecPartitions, keySpecReplication, keyExternalTopic); err != nil {
		return out, err
	}
	for _, v := range strings.Split(s[keyBootstrapServers], ",") {
		if v = strings.TrimSpace(v); v != "" {
			out.seeds = append(out.seeds, v)
		}
	}
	for _, f := range []struct {
		keys []string
		max  int
		to   *int
	}{
		{[]string{keyCMPartitions, keySpecPartitions}, math.MaxInt32, &out.parts},
		{[]string{keyCMReplication, keySpecReplication}, math.MaxInt16, &out.rf},
	} {
		for _, key := range f.keys {
			v, ok := s[key]
			if !ok {
				continue
			}
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return out, fmt.Errorf("%s: %q is not an integer from 1 to %d: %w", key, v, f.max, err)
			}
			if n < 1 || n > f.max {
				return out, fmt.Errorf("%s: %q is not an integer from 1 to %d", key, v, f.max)
			}
			*f.to = n
		}
	}
	out.topic = s[keyExternalTopic]
	return out, nil
}

func (k *kafkaBackend) check(s config.Settings) error {
	_, err := parseKafka(s)
	return err
}

func (k *kafkaBackend) needs() string { return "--kafka-brokers HOST:PORT[,HOST:PORT]" }

func (k *kafkaBackend) start(_ context.Context, e env) (bool, error) {
	k.log, k.reg = e.log, e.reg // also for brokers that name their own cluster
	if k.partitions < 1 || k.partitions > math.MaxInt32 {
		return false, fmt.Errorf("--kafka-partitions %d: want at least 1", k.partitions)
	}
	if k.replication < 0 || k.replication > math.MaxInt16 {
		return false, fmt.Errorf("--kafka-replication-factor %d: want at least 1 (0: the cluster's default)", k.replication)
	}
	if k.brokers == "" {
		return false, nil
	}
	for _, s := range strings.Split(k.brokers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			k.seeds = append(k.seeds, s)
		}
	}
	return len(k.seeds) > 0, nil
}

func (k *kafkaBackend) open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	s, err := parseKafka(b.Settings)
	if err != nil {
		return nil, err
	}
	seeds := k.seeds
	if len(s.seeds) > 0 { // the cluster a Kafka broker's ConfigMap names
		seeds = s.seeds
	}
	opts := []kafka.Option{
		kafka.WithSeedBrokers(seeds...),
		kafka.WithLogger(k.log.With("channel", "kafka", "broker", b.Key())),
	}
	if k.reg != nil {
		opts = append(opts, kafka.WithRegisterer(k.reg))
	}
	parts, rf := k.partitions, k.replication
	if s.parts > 0 { // a KafkaChannel's spec.numPartitions, a ConfigMap's default.topic.partitions
		parts = s.parts
	}
	if s.rf > 0 {
		rf = s.rf
	}
	opts = append(opts, kafka.WithPartitions(int32(parts)), kafka.WithReplicationFactor(int16(rf)))
	if k.minInsync != 0 {
		opts = append(opts, kafka.WithMinInsyncReplicas(int16(k.minInsync)))
	}
	if s.topic != "" { // kafka.eventing.knative.dev/external.topic
		if b.Retention > 0 {
			return nil, fmt.Errorf("metadata.annotations.sluice.dev/retention: not with an external topic (%s): set its retention.ms where it is managed", keyExternalTopic)
		}
		opts = append(opts, kafka.WithTopic(s.topic))
	}
	if b.Retention > 0 { // sluice.dev/retention
		opts = append(opts, kafka.WithRetention(b.Retention))
	}
	return kafka.New(ctx, b.Key(), opts...)
}

func (k *kafkaBackend) close(context.Context) error { return nil }

// standalone reports that a broker naming its own Kafka cluster (bootstrap.servers in
// its ConfigMap) can be opened without --kafka-brokers.
func (k *kafkaBackend) standalone(b config.Broker) bool {
	s, err := parseKafka(b.Settings)
	return err == nil && len(s.seeds) > 0
}

// given reports whether --kafka-brokers names a seed broker, as start reads it.
func (k *kafkaBackend) given() bool {
	for _, s := range strings.Split(k.brokers, ",") {
		if strings.TrimSpace(s) != "" {
			return true
		}
	}
	return false
}
