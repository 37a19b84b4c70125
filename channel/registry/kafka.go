package registry

import (
	"context"
	"log/slog"
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
	brokers   string
	minInsync int

	seeds []string
	log   *slog.Logger
	reg   prometheus.Registerer
}

func (k *kafkaBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&k.brokers, "kafka-brokers", "", "comma-separated host:port seed brokers for the kafka channel")
	fs.IntVar(&k.minInsync, "kafka-min-insync-replicas", 0, "min.insync.replicas of the topics Sluice creates (0: the cluster's default); with acks=all, 2 of 3 replicas means a 202 survives losing one broker")
}

func (k *kafkaBackend) needs() string { return "--kafka-brokers HOST:PORT[,HOST:PORT]" }

func (k *kafkaBackend) start(_ context.Context, e env) (bool, error) {
	k.log, k.reg = e.log, e.reg // also for brokers that name their own cluster
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
	seeds := k.seeds
	if len(b.KafkaBootstrapServers) > 0 { // the cluster a Kafka broker's ConfigMap names
		seeds = b.KafkaBootstrapServers
	}
	opts := []kafka.Option{
		kafka.WithSeedBrokers(seeds...),
		kafka.WithLogger(k.log.With("channel", "kafka", "broker", b.Key())),
	}
	if k.reg != nil {
		opts = append(opts, kafka.WithRegisterer(k.reg))
	}
	if b.Partitions > 0 { // a KafkaChannel's spec.numPartitions
		opts = append(opts, kafka.WithPartitions(int32(b.Partitions)))
	}
	if b.ReplicationFactor > 0 {
		opts = append(opts, kafka.WithReplicationFactor(int16(b.ReplicationFactor)))
	}
	if k.minInsync != 0 {
		opts = append(opts, kafka.WithMinInsyncReplicas(int16(k.minInsync)))
	}
	if b.KafkaTopic != "" { // kafka.eventing.knative.dev/external.topic
		opts = append(opts, kafka.WithTopic(b.KafkaTopic))
	}
	return kafka.New(ctx, b.Key(), opts...)
}

func (k *kafkaBackend) close(context.Context) error { return nil }

// standalone reports that a broker naming its own Kafka cluster (bootstrap.servers in
// its ConfigMap) can be opened without --kafka-brokers.
func (k *kafkaBackend) standalone(b config.Broker) bool { return len(b.KafkaBootstrapServers) > 0 }
