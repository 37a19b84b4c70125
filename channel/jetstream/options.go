package jetstream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for the options below.
const (
	DefaultAckWait    = 30 * time.Second
	DefaultFetchBatch = 256
)

// Fixed settings of every channel.
const (
	// prefix starts the names the channel creates: the stream is called
	// sluice_<broker-hash>, its subjects sluice.<broker-hash>.<subscription-hash>, its
	// consumers sluice_<subscription-hash>.
	prefix = "sluice"
	// maxAckPending bounds the messages a subscription may have delivered but not yet
	// settled, across all replicas sharing it; the server stops delivering beyond it. It
	// bounds the memory a slow subscriber can take.
	maxAckPending = 1024
	// maxPublishPending bounds the messages published but not yet acknowledged by the
	// server, across all Publish calls of the channel. A Publish that would exceed it
	// waits for room until its context ends, then fails with channel.ErrFull.
	maxPublishPending = 4096
	// publishTimeout bounds a Publish whose context has no earlier deadline; it also
	// bounds how long an unacknowledged publish is remembered.
	publishTimeout = 10 * time.Second
)

// Option configures a Channel; pass options to New. Options are applied in order, so a
// later option overrides an earlier one.
type Option func(*config)

type config struct {
	maxBytes   int64
	replicas   int
	ackWait    time.Duration
	fetchBatch int
	retention  time.Duration // the archive's MaxAge; 0: no archive (archive.go)
	// inactive is the inactive threshold Remove gives a consumer it keeps for other
	// replicas on a channel without an archive (InactiveThreshold).
	inactive   time.Duration
	logger     *slog.Logger
	registerer prometheus.Registerer
	// diskFull, when set, reports that the disk under the embedded server's data
	// directory is full (Embedded.DiskFull): Publish then fails at once.
	diskFull func() bool
}

func defaultConfig() config {
	return config{
		maxBytes:   -1,
		replicas:   1,
		ackWait:    DefaultAckWait,
		fetchBatch: DefaultFetchBatch,
		inactive:   InactiveThreshold,
		logger:     slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	switch {
	case c.maxBytes == 0 || c.maxBytes < -1:
		return fmt.Errorf("jetstream: WithMaxBytes(%d): want > 0 or -1 (unlimited)", c.maxBytes)
	case c.replicas < 1 || c.replicas > 5:
		return fmt.Errorf("jetstream: WithReplicas(%d): want 1 to 5", c.replicas)
	case c.ackWait < 100*time.Millisecond:
		return fmt.Errorf("jetstream: WithAckWait(%v): want at least 100ms", c.ackWait)
	case c.fetchBatch < 1:
		return fmt.Errorf("jetstream: WithFetchBatch(%d): want at least 1", c.fetchBatch)
	case c.retention < 0:
		return fmt.Errorf("jetstream: WithRetention(%v): want 0 (no archive) or more", c.retention)
	case c.logger == nil:
		return fmt.Errorf("jetstream: WithLogger(nil)")
	}
	return nil
}

// withDiskFull makes Publish fail at once, with the reason, while full reports true:
// the Backend sets it for a channel on its embedded server (Embedded.DiskFull).
func withDiskFull(full func() bool) Option { return func(c *config) { c.diskFull = full } }

// withInactiveThreshold sets the inactive threshold Remove gives a consumer it keeps
// for other replicas (default InactiveThreshold).
func withInactiveThreshold(d time.Duration) Option { return func(c *config) { c.inactive = d } }

// WithMaxBytes limits the bytes the broker's stream may hold (events not yet settled by
// every subscription they were routed to). When the limit is reached Publish returns an
// error wrapping channel.ErrFull until consumers catch up. Default -1: no limit of its
// own, bounded by the server's JetStream store limit.
func WithMaxBytes(n int64) Option { return func(c *config) { c.maxBytes = n } }

// WithReplicas sets how many servers of the NATS cluster hold each broker's stream
// (JetStream's stream replicas, 1 to 5). With more than one, the server acknowledges a
// message only once a quorum of them stored it (2 of 3 for R3), so Publish returning nil
// — and the 202 ingress answers — means a quorum holds the event, and losing one server of
// an R3 stream loses nothing. An existing stream is updated to n. Default 1 (the embedded
// server is a single node).
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithAckWait sets how long the server waits for a delivered message to be settled
// before delivering it again. While a Message is held (between Receive and Ack or
// Release) the channel keeps it alive with a progress signal every AckWait/3, so AckWait
// only matters after a crash: unsettled messages are redelivered within AckWait of it.
// Default 30s.
func WithAckWait(d time.Duration) Option { return func(c *config) { c.ackWait = d } }

// WithFetchBatch sets how many messages a consumer asks the server for at once; each
// consumer buffers at most twice this many messages locally. Default 256.
func WithFetchBatch(n int) Option { return func(c *config) { c.fetchBatch = n } }

// WithLogger sets the logger for backend errors and recoveries. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithRegisterer registers the channel's metrics (consumer lag per subscription,
// published messages, publish errors by reason) with reg, labelled with the broker key.
// Close unregisters them. Default: no metrics.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) { c.registerer = reg }
}
