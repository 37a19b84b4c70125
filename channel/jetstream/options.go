package jetstream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for the options below.
const (
	DefaultPrefix            = "sluice"
	DefaultAckWait           = 30 * time.Second
	DefaultMaxAckPending     = 1024
	DefaultFetchBatch        = 256
	DefaultMaxPublishPending = 4096
	DefaultPublishTimeout    = 10 * time.Second
)

// Option configures a Channel; pass options to New. Options are applied in order, so a
// later option overrides an earlier one.
type Option func(*config)

type config struct {
	prefix            string
	maxBytes          int64
	ackWait           time.Duration
	maxAckPending     int
	replicas          int
	fetchBatch        int
	maxPublishPending int
	publishTimeout    time.Duration
	logger            *slog.Logger
	registerer        prometheus.Registerer
}

func defaultConfig() config {
	return config{
		prefix:            DefaultPrefix,
		maxBytes:          -1,
		ackWait:           DefaultAckWait,
		maxAckPending:     DefaultMaxAckPending,
		replicas:          1,
		fetchBatch:        DefaultFetchBatch,
		maxPublishPending: DefaultMaxPublishPending,
		publishTimeout:    DefaultPublishTimeout,
		logger:            slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	if !validToken(c.prefix) {
		return fmt.Errorf("jetstream: prefix %q: want letters, digits, '-' or '_'", c.prefix)
	}
	switch {
	case c.maxBytes == 0 || c.maxBytes < -1:
		return fmt.Errorf("jetstream: max bytes %d: want > 0 or -1 (unlimited)", c.maxBytes)
	case c.ackWait < 100*time.Millisecond:
		return fmt.Errorf("jetstream: ack wait %v: want at least 100ms", c.ackWait)
	case c.maxAckPending < 1:
		return fmt.Errorf("jetstream: max ack pending %d: want at least 1", c.maxAckPending)
	case c.replicas < 1 || c.replicas > 5:
		return fmt.Errorf("jetstream: replicas %d: want 1 to 5", c.replicas)
	case c.fetchBatch < 1:
		return fmt.Errorf("jetstream: fetch batch %d: want at least 1", c.fetchBatch)
	case c.maxPublishPending < 1:
		return fmt.Errorf("jetstream: max publish pending %d: want at least 1", c.maxPublishPending)
	case c.publishTimeout <= 0:
		return fmt.Errorf("jetstream: publish timeout %v: want > 0", c.publishTimeout)
	}
	return nil
}

// WithPrefix sets the prefix of the names the channel creates: the stream is called
// PREFIX_<broker-hash>, its subjects are PREFIX.<broker-hash>.<subscription-hash>, its
// consumers PREFIX_<subscription-hash>. Use it to keep several Sluice installations
// apart on one NATS cluster. It must be a single subject token of letters, digits, '-'
// and '_'. Default "sluice".
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithMaxBytes limits the bytes the broker's stream may hold (events not yet settled by
// every subscription they were routed to). When the limit is reached Publish returns an
// error wrapping channel.ErrFull until consumers catch up. Default -1: no limit of its
// own, bounded by the server's JetStream store limit.
func WithMaxBytes(n int64) Option { return func(c *config) { c.maxBytes = n } }

// WithAckWait sets how long the server waits for a delivered message to be settled
// before delivering it again. While a Message is held (between Receive and Ack or
// Release) the channel keeps it alive with a progress signal every AckWait/3, so AckWait
// only matters after a crash: unsettled messages are redelivered within AckWait of it.
// Default 30s.
func WithAckWait(d time.Duration) Option { return func(c *config) { c.ackWait = d } }

// WithMaxAckPending bounds the messages a subscription may have delivered but not yet
// settled, across all replicas sharing it; the server stops delivering beyond it. It
// bounds the memory a slow subscriber can take. Default 1024.
func WithMaxAckPending(n int) Option { return func(c *config) { c.maxAckPending = n } }

// WithReplicas sets the stream's replica count (1 to 5) on a NATS cluster. The embedded
// server is a single node: keep the default 1 there.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithFetchBatch sets how many messages a consumer asks the server for at once; each
// consumer buffers at most twice this many messages locally. Default 256.
func WithFetchBatch(n int) Option { return func(c *config) { c.fetchBatch = n } }

// WithMaxPublishPending bounds the messages published but not yet acknowledged by the
// server, across all Publish calls of the channel. A Publish that would exceed it waits
// for room until its context ends, then fails with channel.ErrFull. Default 4096.
func WithMaxPublishPending(n int) Option { return func(c *config) { c.maxPublishPending = n } }

// WithPublishTimeout bounds a Publish whose context has no earlier deadline; it also
// bounds how long an unacknowledged publish is remembered. Default 10s.
func WithPublishTimeout(d time.Duration) Option { return func(c *config) { c.publishTimeout = d } }

// WithLogger sets the logger for backend errors and recoveries. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithRegisterer registers the channel's metrics (consumer lag per subscription,
// published messages, publish errors by reason) with reg, labelled with the broker key.
// Close unregisters them. Default: no metrics.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.registerer = reg }
}
