package delivery

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sluice-broker/sluice/event"
)

// Replier ingests a subscriber's reply into the broker the trigger belongs to, where it
// is matched against all triggers like any new event. It must not block for long: a full
// channel returns an error at once (channel.ErrFull). An error fails the delivery, which
// is then retried, as the Knative data-plane contract asks. The Replier owns e.
type Replier func(ctx context.Context, e *event.Event) error

// DeadLetterer stores a dead-letter event (the original with the knativeerror*
// extensions) durably for later delivery to the dead-letter sink, instead of the
// dispatcher POSTing it there itself. A broker on a durable channel uses it to write
// dead-lettered events through its backend: the original message is acked only once the
// dead-letter event is stored. An error is retried with the target's policy, like a sink
// that failed. The DeadLetterer owns e.
type DeadLetterer func(ctx context.Context, e *event.Event) error

// Option configures a Dispatcher; see NewDispatcher.
type Option func(*Dispatcher)

// WithClient sets the HTTP client used for subscribers, reply addresses and dead-letter
// sinks. Share one client (NewClient) across all dispatchers so they share its keep-alive
// pool. Default: a NewClient of the dispatcher's own.
func WithClient(c *http.Client) Option { return func(d *Dispatcher) { d.client = c } }

// WithReplier sets where replies go when the target has no ReplyURL. Default: none;
// replies are then counted (replies_total{outcome="no_replier"}) and logged.
func WithReplier(r Replier) Option { return func(d *Dispatcher) { d.replier = r } }

// WithDeadLetterer hands dead-letter events to dl instead of POSTing them to the
// target's dead-letter sink (which must still be set: it names where they go, and none
// means the event is logged as undeliverable as usual). Default: none.
func WithDeadLetterer(dl DeadLetterer) Option { return func(d *Dispatcher) { d.deadLetterer = dl } }

// WithMaxReplyBytes bounds the body of a reply (a 2xx response carrying an event) the
// dispatcher reads: the broker passes its --max-event-bytes, so that a reply is held to
// the bound of an event sent to the ingress. A larger reply fails the delivery for good:
// the event is dead-lettered, its knativeerrordata naming the limit. Default
// DefaultMaxReplyBytes.
func WithMaxReplyBytes(n int64) Option {
	return func(d *Dispatcher) {
		if n > 0 {
			d.maxReply = n
		}
	}
}

// DefaultMaxReplyBytes is the bound on a reply's body without WithMaxReplyBytes.
const DefaultMaxReplyBytes = 1 << 20

// WithLogger sets the logger. Default: slog.Default(). The dispatcher adds
// trigger="namespace/name" to every record.
func WithLogger(l *slog.Logger) Option { return func(d *Dispatcher) { d.log = l } }

// WithMetrics sets the metrics the dispatcher reports to; share one Metrics (NewMetrics)
// across dispatchers. Default: a private, unregistered Metrics.
func WithMetrics(m *Metrics) Option { return func(d *Dispatcher) { d.metrics = m } }

// WithAdaptive switches the adaptive in-flight limit (AIMD, see the package doc) on or
// off. Default: on.
func WithAdaptive(on bool) Option { return func(d *Dispatcher) { d.adaptive = on } }

// WithMaxPending bounds the messages the dispatcher holds besides those in flight:
// messages waiting for a retry timer and, on an ordered target, messages queued behind an
// earlier one of the same key. When the bound is reached the dispatcher stops taking
// messages from the consumer until one settles, so memory stays bounded by
// MaxInFlight + n messages. The bound is fixed at creation. Default:
// max(4 × MaxInFlight, 256).
func WithMaxPending(n int) Option { return func(d *Dispatcher) { d.maxPending = n } }
