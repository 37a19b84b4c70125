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
	brokers string

	seeds []string
	log   *slog.Logger
	reg   prometheus.Registerer
}

func (k *kafkaBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&k.brokers, "kafka-brokers", "", "comma-separated host:port seed brokers for the kafka channel")
}

func (k *kafkaBackend) needs() string { return "--kafka-brokers HOST:PORT[,HOST:PORT]" }

func (k *kafkaBackend) start(_ context.Context, e env) (bool, error) {
	if k.brokers == "" {
		return false, nil
	}
	for _, s := range strings.Split(k.brokers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			k.seeds = append(k.seeds, s)
		}
	}
	k.log, k.reg = e.log, e.reg
	return len(k.seeds) > 0, nil
}

func (k *kafkaBackend) open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	opts := []kafka.Option{
		kafka.WithSeedBrokers(k.seeds...),
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
	return kafka.New(ctx, b.Key(), opts...)
}

func (k *kafkaBackend) close(context.Context) error { return nil }
