package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/overload"
)

// ChannelOpener opens the channel of one broker: b.Channel names its backend
// (config.ChannelDefault for the opener's default). The broker knows backends only
// through it and the channel interfaces; Sluice's is channel/registry's Registry.Open.
type ChannelOpener func(ctx context.Context, b config.Broker) (channel.Channel, error)

// Option configures a Server; see NewServer.
type Option func(*options)

type options struct {
	open            ChannelOpener
	maxEventBytes   int64
	shutdownTimeout time.Duration
	publishTimeout  time.Duration
	maxInFlight     int
	overload        overload.Options // WithOverload
	dedupEntries    int
	logger          *slog.Logger
	registry        prometheus.Registerer
	tracer          trace.Tracer            // nil: tracing off (tracing.go)
	deadLetters     delivery.DeadLetterHook // nil: none (deadletters.go)
	authorizer      Authorizer
	tokens          delivery.TokenSource
	denyEgress      delivery.DenyList // --deny-egress
	ownOrigin       string            // WithInternalIdentity
	identities      Identities        // nil: none
	checkEvery      time.Duration     // how often a channel.Checker is asked (health.go)
	opsGuarded      bool              // WithOpsGuarded: the operator endpoints need a token
	now             func() time.Time  // the clock of the health marks (health.go); tests set it
	dlq             dlq.Limits        // WithDLQ (dlq.go)
	dlqSet          bool
	dlqMemory       int64 // WithDLQMemoryLimit (dlq.go); 0: dlq.DefaultMemoryTotal
}

// Defaults of the server's options. The in-flight default is the dispatcher's,
// delivery.DefaultMaxInFlight.
const (
	DefaultMaxEventBytes   = 1 << 20
	DefaultShutdownTimeout = 30 * time.Second
	DefaultPublishTimeout  = 5 * time.Second
)

// WithChannelOpener sets how brokers' channels are opened. Required.
func WithChannelOpener(open ChannelOpener) Option { return func(o *options) { o.open = open } }

// WithMaxEventBytes bounds a request body; larger ones get 413. Default
// DefaultMaxEventBytes (1 MiB).
func WithMaxEventBytes(n int64) Option { return func(o *options) { o.maxEventBytes = n } }

// WithShutdownTimeout bounds how long the removal of a trigger or broker waits for its
// queued events to be delivered. Default DefaultShutdownTimeout (30 s).
func WithShutdownTimeout(d time.Duration) Option { return func(o *options) { o.shutdownTimeout = d } }

// WithPublishTimeout bounds how long ingress waits for a durable channel to store a
// request's events before answering 503. Default DefaultPublishTimeout (5 s).
func WithPublishTimeout(d time.Duration) Option { return func(o *options) { o.publishTimeout = d } }

// WithMaxInFlight bounds the concurrent deliveries of one trigger. Default
// delivery.DefaultMaxInFlight.
func WithMaxInFlight(n int) Option { return func(o *options) { o.maxInFlight = n } }

// WithOverload sets the overload control of ingress (package overload,
// docs/overload.md): how long a request waits for room when its broker is full, how
// long a refused connection is held, the backlog and storing bounds, whether the
// in-flight limit toward subscribers adapts. Default overload.DefaultOptions().
func WithOverload(o overload.Options) Option { return func(opts *options) { opts.overload = o } }

// WithDedupEntries bounds the (source, id) pairs the dedup window of one broker
// (sluice.dev/dedup-window) remembers: past it, each pair accepted forgets the oldest
// before its window ends (counted in sluice_dedup_evicted_total), so a duplicate of it
// is stored again. Each pair costs at most about 150 bytes whatever its length. Default
// DefaultDedupEntries (100,000).
func WithDedupEntries(n int) Option { return func(o *options) { o.dedupEntries = n } }

// WithDenyEgress makes deliveries (to subscribers, reply URLs and dead-letter sinks)
// refuse to connect to any address in deny, checked at dial time on the resolved
// address: such a delivery fails without a retry and is dead-lettered. Default: none.
func WithDenyEgress(deny delivery.DenyList) Option { return func(o *options) { o.denyEgress = deny } }

// WithOpsGuarded tells the server that something in front of its handler lets only
// holders of an operator token reach its operator endpoints (sluice serve's
// --ops-token-file). Only then do POST /triggers/<ns>/<name>/pause and /resume act;
// without it they answer 403 naming --ops-token-file, so that nobody who merely reaches
// the port can stop deliveries. GET of a trigger's state stays open, like /status.
// Default false.
func WithOpsGuarded(guarded bool) Option { return func(o *options) { o.opsGuarded = guarded } }

// WithLogger sets the logger. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer registers the server's metrics with reg. Default: a private registry.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.registry = reg } }

func defaultOptions() options {
	return options{
		maxEventBytes:   DefaultMaxEventBytes,
		shutdownTimeout: DefaultShutdownTimeout,
		publishTimeout:  DefaultPublishTimeout,
		maxInFlight:     delivery.DefaultMaxInFlight,
		overload:        overload.DefaultOptions(),
		dedupEntries:    DefaultDedupEntries,
		logger:          slog.Default(),
		checkEvery:      defaultCheckEvery,
		now:             time.Now,
	}
}

// withCheckEvery sets how often a channel.Checker is asked; 0 starts no checker, the
// test runs checks by hand. Tests only.
func withCheckEvery(d time.Duration) Option { return func(o *options) { o.checkEvery = d } }

// withClock sets the clock the health marks are timed with; tests only.
func withClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// validate is the one place options are checked; the error names the option.
func (o *options) validate() error {
	switch {
	case o.open == nil:
		return errors.New("broker: WithChannelOpener is required (channel/registry's Registry.Open opens Sluice's backends)")
	case o.maxEventBytes <= 0:
		return fmt.Errorf("broker: WithMaxEventBytes(%d): want > 0", o.maxEventBytes)
	case o.shutdownTimeout <= 0:
		return fmt.Errorf("broker: WithShutdownTimeout(%v): want > 0", o.shutdownTimeout)
	case o.publishTimeout <= 0:
		return fmt.Errorf("broker: WithPublishTimeout(%v): want > 0", o.publishTimeout)
	case o.maxInFlight < 1:
		return fmt.Errorf("broker: WithMaxInFlight(%d): want at least 1", o.maxInFlight)
	case o.overload.Validate() != nil:
		return fmt.Errorf("broker: WithOverload: %w", o.overload.Validate())
	case o.dedupEntries < 1:
		return fmt.Errorf("broker: WithDedupEntries(%d): want at least 1", o.dedupEntries)
	case o.dlqSet && o.dlq.MaxEntries != 0 && o.dlq.Validate() != nil:
		return fmt.Errorf("broker: WithDLQ: %w", o.dlq.Validate())
	case o.logger == nil:
		return errors.New("broker: WithLogger(nil): want a logger")
	}
	return nil
}
