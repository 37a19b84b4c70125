package rabbitmq

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the options below and the channel's fixed settings.
const (
	// DefaultPrefix prefixes every exchange and queue name.
	DefaultPrefix = "sluice"
	// DefaultPrefetch is how many messages of one subscription RabbitMQ hands a consumer
	// before it acknowledges some: the bound on messages unsettled per subscription and
	// process (Consumer.Receive hands out no more until some are settled).
	DefaultPrefetch = 1024
	// MaxPrefetch is the largest prefetch: AMQP's prefetch count is 16 bits.
	MaxPrefetch = 65535
	// DefaultMaxMessageBytes is the largest message Publish sends, headers and data
	// together: RabbitMQ's own default max_message_size (128 MiB). A larger event fails
	// with channel.ErrTooLarge before anything is sent; a message over the server's limit
	// would close the publishing channel for every concurrent Publish.
	DefaultMaxMessageBytes = 128 << 20
	// DefaultDLQMaxBytes is the default bound of a broker's dead-letter stream
	// (WithDLQMaxBytes); MinDLQMaxBytes is the smallest.
	DefaultDLQMaxBytes = 64 << 20
	MinDLQMaxBytes     = 1 << 20
	// QueueQuorum and QueueClassic are the queue types (RabbitmqBrokerConfig's
	// spec.queueType). Quorum queues replicate each message to a majority of the
	// cluster's nodes before the publisher confirm; classic queues store it on one node.
	QueueQuorum  = "quorum"
	QueueClassic = "classic"

	// dialTimeout bounds one connection attempt; heartbeat is how soon a silent peer is
	// taken for dead.
	dialTimeout = 5 * time.Second
	heartbeat   = 10 * time.Second
	// maxBackoff bounds the wait between reconnection attempts.
	maxBackoff = 2 * time.Second
	// lenEvery is how often, at most, Len asks RabbitMQ for a queue's depth (in the
	// background; Len itself never waits for it).
	lenEvery = 100 * time.Millisecond
)

// config holds what the options set.
type config struct {
	url             string
	vhost           string // "": the URL's
	prefix          string
	queueType       string
	prefetch        int
	maxQueueBytes   int64 // 0: no limit of Sluice's
	maxMessageBytes int
	dlqMaxBytes     int64
	logger          *slog.Logger
}

func defaultConfig() config {
	return config{
		prefix:          DefaultPrefix,
		queueType:       QueueQuorum,
		prefetch:        DefaultPrefetch,
		maxMessageBytes: DefaultMaxMessageBytes,
		dlqMaxBytes:     DefaultDLQMaxBytes,
		logger:          slog.New(slog.DiscardHandler),
	}
}

// validate is the one place the options are checked; New returns its error.
func (c *config) validate() error {
	var errs []error
	if c.url == "" {
		errs = append(errs, errors.New("WithURL: no URL"))
	}
	if c.prefix == "" {
		errs = append(errs, errors.New("WithPrefix: empty prefix"))
	}
	if c.queueType != QueueQuorum && c.queueType != QueueClassic {
		errs = append(errs, fmt.Errorf("WithQueueType: %q, want %s or %s", c.queueType, QueueQuorum, QueueClassic))
	}
	if c.prefetch < 1 || c.prefetch > MaxPrefetch {
		errs = append(errs, fmt.Errorf("WithPrefetch: %d, want 1 to %d", c.prefetch, MaxPrefetch))
	}
	if c.maxQueueBytes < 0 {
		errs = append(errs, fmt.Errorf("WithMaxQueueBytes: %d, want 0 (no limit) or more", c.maxQueueBytes))
	}
	if c.maxMessageBytes < 1 {
		errs = append(errs, fmt.Errorf("WithMaxMessageBytes: %d, want at least 1", c.maxMessageBytes))
	}
	if c.dlqMaxBytes < MinDLQMaxBytes {
		errs = append(errs, fmt.Errorf("WithDLQMaxBytes: %d, want at least %d", c.dlqMaxBytes, MinDLQMaxBytes))
	}
	if c.logger == nil {
		errs = append(errs, errors.New("WithLogger: nil logger"))
	}
	return errors.Join(errs...)
}

// Option configures a Channel; pass options to New.
type Option func(*config)

// WithURL sets the AMQP URL of the RabbitMQ node or cluster,
// amqp://user:password@host:port/vhost (amqps:// for TLS). Required.
func WithURL(u string) Option { return func(c *config) { c.url = u } }

// WithVhost sets the virtual host instead of the URL's (RabbitmqBrokerConfig's
// spec.vhost).
func WithVhost(v string) Option { return func(c *config) { c.vhost = v } }

// WithPrefix sets the prefix of the channel's exchange and queue names, default
// DefaultPrefix: the exchange is "<prefix>.<namespace>.<name>", a subscription's queue
// "<exchange>/<subscription>".
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithQueueType sets the type of the queues this package declares: QueueQuorum (the
// default) or QueueClassic. An existing queue is used as it is.
func WithQueueType(t string) Option { return func(c *config) { c.queueType = t } }

// WithPrefetch sets how many unsettled messages RabbitMQ hands each subscription's
// consumer, default DefaultPrefetch, at most MaxPrefetch.
func WithPrefetch(n int) Option { return func(c *config) { c.prefetch = n } }

// WithMaxQueueBytes bounds the bytes of message data each subscription's queue holds
// (x-max-length-bytes with x-overflow reject-publish) when this package declares it;
// past it Publish fails with channel.ErrFull until consumers catch up. Default 0: no
// bound of the queue's own (RabbitMQ's disk and memory alarms, and the broker's
// --max-backlog, still bound it). An existing queue keeps its arguments.
func WithMaxQueueBytes(n int64) Option { return func(c *config) { c.maxQueueBytes = n } }

// WithMaxMessageBytes sets the largest message Publish sends, default
// DefaultMaxMessageBytes; set it to the server's max_message_size when that is lower.
func WithMaxMessageBytes(n int) Option { return func(c *config) { c.maxMessageBytes = n } }

// WithDLQMaxBytes bounds the broker's dead-letter stream (Channel.DLQStore) to n bytes
// on RabbitMQ's disk (x-max-length-bytes), default DefaultDLQMaxBytes, at least
// MinDLQMaxBytes. Every replica evicts a dead letter, whatever its trigger, once half of
// n of newer messages were appended after it, so that RabbitMQ never frees one the
// store still holds; that half also bounds what each replica keeps in memory. A dead
// letter over an eighth of n is refused. Every replica must use the same n.
func WithDLQMaxBytes(n int64) Option { return func(c *config) { c.dlqMaxBytes = n } }

// WithLogger sets the logger for backend errors (connection lost, a queue that cannot
// be declared), logged at most once per 10 seconds per kind; by default nothing is
// logged.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }
