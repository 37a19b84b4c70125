package registry

import (
	"context"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/rabbitmq"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/bytesize"
)

// rabbitmqBackend opens one exchange per broker on the RabbitMQ at --rabbitmq-url; each
// channel has its own connection.
type rabbitmqBackend struct {
	url           string
	prefetch      int
	maxQueueBytes bytesize.Size
	dlqMaxBytes   bytesize.Size

	log *slog.Logger
}

// newRabbitmqBackend returns the backend with its defaults, which hold when its flags
// are not registered too.
func newRabbitmqBackend() *rabbitmqBackend {
	return &rabbitmqBackend{prefetch: rabbitmq.DefaultPrefetch, dlqMaxBytes: rabbitmq.DefaultDLQMaxBytes}
}

func (r *rabbitmqBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.url, "rabbitmq-url", "", "AMQP URL of the RabbitMQ node or cluster of the rabbitmq channel: amqp://USER:PASSWORD@HOST:PORT/VHOST (amqps:// for TLS)")
	fs.IntVar(&r.prefetch, "rabbitmq-prefetch", r.prefetch, "unsettled messages RabbitMQ hands each trigger's consumer (1-65535): the bound on what one trigger holds in memory")
	fs.Var(&r.dlqMaxBytes, "rabbitmq-dlq-max-bytes", "bytes a broker's dead-letter stream may take on RabbitMQ's disk, all its triggers together (at least 1MiB): a dead letter is evicted, oldest first, once half of it was written after it; the same on every replica")
	fs.Var(&r.maxQueueBytes, "rabbitmq-max-queue-bytes", "bytes of event data a trigger's queue may hold waiting (x-max-length-bytes, reject-publish) when Sluice declares it; past it ingress answers 429 (default: no limit of the queue's own)")
}

// needs names the flag without a sample URL: `sluice validate` and the logs redact
// every URL in a reason, and amqp://USER:PASSWORD@HOST:PORT/VHOST would show as xxxxx.
func (r *rabbitmqBackend) needs() string { return "--rabbitmq-url URL" }

// The settings (config.Settings) the rabbitmq backend reads: a RabbitMQBroker's
// RabbitmqBrokerConfig fields.
const (
	keyRabbitQueueType = "spec.queueType"
	keyRabbitVhost     = "spec.vhost"
)

func (r *rabbitmqBackend) check(s config.Settings) error {
	if err := onlyKeys(s, keyRabbitQueueType, keyRabbitVhost); err != nil {
		return err
	}
	switch q := s[keyRabbitQueueType]; q {
	case "", rabbitmq.QueueQuorum, rabbitmq.QueueClassic:
	default:
		return fmt.Errorf("%s: %q is not %s or %s", keyRabbitQueueType, q, rabbitmq.QueueQuorum, rabbitmq.QueueClassic)
	}
	return nil
}

func (r *rabbitmqBackend) start(_ context.Context, e env) (bool, error) {
	if r.prefetch < 1 || r.prefetch > rabbitmq.MaxPrefetch {
		return false, fmt.Errorf("--rabbitmq-prefetch %d: want 1 to %d", r.prefetch, rabbitmq.MaxPrefetch)
	}
	if r.maxQueueBytes < 0 {
		return false, fmt.Errorf("--rabbitmq-max-queue-bytes %d: want 0 (no limit) or more", r.maxQueueBytes)
	}
	if r.dlqMaxBytes < rabbitmq.MinDLQMaxBytes {
		return false, fmt.Errorf("--rabbitmq-dlq-max-bytes %d: want at least %d (1MiB)", r.dlqMaxBytes, rabbitmq.MinDLQMaxBytes)
	}
	if r.url == "" {
		return false, nil
	}
	if _, err := amqp.ParseURI(r.url); err != nil {
		return false, fmt.Errorf("--rabbitmq-url: %w", err)
	}
	r.log = e.log
	return true, nil
}

func (r *rabbitmqBackend) open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	if err := r.check(b.Settings); err != nil {
		return nil, err
	}
	opts := []rabbitmq.Option{
		rabbitmq.WithURL(r.url),
		rabbitmq.WithPrefetch(r.prefetch),
		rabbitmq.WithMaxQueueBytes(int64(r.maxQueueBytes)),
		rabbitmq.WithDLQMaxBytes(int64(r.dlqMaxBytes)),
		rabbitmq.WithLogger(r.log.With("channel", "rabbitmq", "broker", b.Key())),
	}
	if q := b.Settings[keyRabbitQueueType]; q != "" { // a RabbitmqBrokerConfig's spec.queueType
		opts = append(opts, rabbitmq.WithQueueType(q))
	}
	if v := b.Settings[keyRabbitVhost]; v != "" { // its spec.vhost
		opts = append(opts, rabbitmq.WithVhost(v))
	}
	return rabbitmq.New(ctx, b.Key(), opts...)
}

func (r *rabbitmqBackend) close(context.Context) error { return nil }

func (r *rabbitmqBackend) given() bool { return r.url != "" }
