package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/jetstream"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// channelFlags choose and reach the channel backends of `sluice serve`.
type channelFlags struct {
	defaultChannel string
	dataDir        string
	natsURL        string
	kafkaBrokers   string
	jsMaxBytes     byteSize
	jsAckWait      time.Duration
}

func (c *channelFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&c.defaultChannel, "channel", "memory", "channel of brokers without a sluice.dev/channel annotation: memory, jetstream or kafka")
	fl.StringVar(&c.dataDir, "data-dir", "", "directory of the embedded JetStream server's files (jetstream channel)")
	fl.StringVar(&c.natsURL, "nats-url", "", "use this external NATS cluster for the jetstream channel instead of the embedded server")
	fl.StringVar(&c.kafkaBrokers, "kafka-brokers", "", "comma-separated host:port seed brokers for the kafka channel")
	fl.Var(&c.jsMaxBytes, "jetstream-max-bytes", "bytes one broker's JetStream stream may hold; when full, ingress answers 429 (default: unlimited, up to the disk)")
	fl.DurationVar(&c.jsAckWait, "jetstream-ack-wait", 30*time.Second, "after a crash, how long JetStream waits before redelivering the events a dead process held")
}

// open prepares the durable backends the flags ask for and returns the factory that
// opens one broker's channel on them, and a function that closes them after the brokers.
func (c *channelFlags) open(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, memoryLimit int64) (broker.ChannelOpener, func(), error) {
	switch c.defaultChannel {
	case "memory", "jetstream", "kafka":
	default:
		return nil, nil, fmt.Errorf("--channel %q: want memory, jetstream or kafka", c.defaultChannel)
	}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	// Durable backends are wired here: each case prepares its connection once and adds
	// a closer; the factory below opens one channel per broker on it.
	var js *jetstream.Backend // one NATS connection for every jetstream broker
	if c.dataDir != "" || c.natsURL != "" {
		var err error
		js, err = jetstream.OpenBackend(ctx, jetstream.WithDataDir(c.dataDir), jetstream.WithURL(c.natsURL),
			jetstream.WithBackendLogger(log), jetstream.WithChannelOptions(c.jetstreamOptions(reg)...))
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := js.Close(ctx); err != nil {
				log.Error("closing the jetstream backend", "err", err)
			}
		})
	}
	budget := memory.NewBudget(memoryLimit)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_queue_bytes", Help: "Bytes of events held by memory channels."},
		func() float64 { return float64(budget.Used()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_queue_bytes_limit", Help: "The memory channels' byte budget (--memory-limit)."},
		func() float64 { return float64(budget.Limit()) }))
	factory := func(ctx context.Context, b config.Broker) (channel.Channel, error) {
		backend := b.Channel
		if backend == config.ChannelDefault {
			backend = c.defaultChannel
		}
		switch backend {
		case "memory":
			return memory.New(memory.WithBudget(budget)), nil
		case "jetstream":
			if js == nil {
				return nil, errors.New("the jetstream channel needs --data-dir DIR (embedded NATS server) or --nats-url URL (external cluster)")
			}
			ch, err := js.New(ctx, b.Key())
			if err != nil {
				return nil, err
			}
			return durableChannel{ch}, nil
		case "kafka":
			if c.kafkaBrokers == "" {
				return nil, errors.New("the kafka channel needs --kafka-brokers HOST:PORT[,HOST:PORT]")
			}
			opts := []kafka.Option{
				kafka.WithSeedBrokers(strings.Split(c.kafkaBrokers, ",")...),
				kafka.WithLogger(log.With("channel", "kafka", "broker", b.Key())), kafka.WithRegisterer(reg),
			}
			if b.Partitions > 0 { // a KafkaChannel's spec.numPartitions
				opts = append(opts, kafka.WithPartitions(int32(b.Partitions)))
			}
			if b.ReplicationFactor > 0 {
				opts = append(opts, kafka.WithReplicationFactor(int16(b.ReplicationFactor)))
			}
			ch, err := kafka.New(ctx, b.Key(), opts...)
			if err != nil {
				return nil, err
			}
			return durableChannel{ch}, nil
		}
		return nil, fmt.Errorf("unknown channel backend %q (want memory, jetstream or kafka)", backend)
	}
	return factory, closeAll, nil
}

func (c *channelFlags) jetstreamOptions(reg prometheus.Registerer) []jetstream.Option {
	opts := []jetstream.Option{jetstream.WithRegisterer(reg), jetstream.WithAckWait(c.jsAckWait)}
	if c.jsMaxBytes > 0 {
		opts = append(opts, jetstream.WithMaxBytes(int64(c.jsMaxBytes)))
	}
	return opts
}

// durableChannel marks a jetstream or kafka channel channel.Durable until those packages
// say so themselves.
type durableChannel struct{ channel.Channel }

func (durableChannel) Durable() bool { return true }
