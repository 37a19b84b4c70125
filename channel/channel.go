// Package channel defines where events wait between ingress and delivery: one interface,
// several backends beneath it (memory, jetstream, kafka). A channel knows nothing of HTTP.
//
// A broker owns one Channel. Ingress routes each event to the subscriptions (triggers)
// whose filters match and publishes it with that route; each subscription's dispatcher
// consumes its own stream of messages and settles every one with Ack (delivered or
// dead-lettered) or leaves it for redelivery (durable backends, on shutdown).
package channel

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/event"
)

// Errors a Channel returns. Ingress maps ErrFull to 429 and ErrUnavailable to 503, both
// with Retry-After, and ErrTooLarge to 413 without (sending the event again cannot help).
var (
	// ErrFull: the channel has no room for the events now; try again later.
	ErrFull = errors.New("channel full")
	// ErrUnavailable: the backend cannot store events now (unreachable, disk full, ...).
	ErrUnavailable = errors.New("channel backend unavailable")
	// ErrClosed: the channel or consumer was closed.
	ErrClosed = errors.New("channel closed")
	// ErrTooLarge: an event is larger than the backend stores, however often it is sent
	// (a record or message size limit below the ingress's --max-event-bytes).
	ErrTooLarge = errors.New("event too large for the channel")
	// ErrNotKept: the channel keeps no event once delivered (Replayer: no retention set).
	ErrNotKept = errors.New("channel keeps no delivered events")
	// ErrNoDLQStore: the channel, as configured, keeps no dead-letter store (DLQStorer):
	// the broker keeps it in memory.
	ErrNoDLQStore = errors.New("the channel keeps no dead-letter store as configured")
)

// Envelope is one event and the names of the subscriptions it was routed to at ingress.
// An envelope routed to no subscription is not stored.
type Envelope struct {
	Event         *event.Event
	Subscriptions []string
}

// Channel stores the events of one broker until every subscription they were routed to
// has settled them. Implementations are safe for concurrent use.
type Channel interface {
	// Publish stores envs. It returns nil only when all of them are stored (for a durable
	// backend: acknowledged by it); on error none of them may be considered stored and the
	// caller rejects the request. Publish must not block for long: a full channel returns
	// ErrFull at once, a slow backend an error wrapping ErrUnavailable when ctx ends.
	// Publish must not retain envs or their Subscriptions slices after it returns (the
	// caller reuses them); the events themselves are kept and never modified.
	Publish(ctx context.Context, envs []Envelope) error

	// Consume opens the subscription called name (creating it if new) and returns its
	// consumer. Events published to name before Consume may be lost on a memory channel;
	// open every subscription before routing to it.
	Consume(ctx context.Context, name string) (Consumer, error)

	// Remove deletes the subscription called name once its consumer is closed; events
	// still stored for it are released (and reported by the caller as undelivered).
	Remove(ctx context.Context, name string) error

	// Close releases the channel's resources. Consumers return ErrClosed afterwards.
	Close() error
}

// Consumer is one subscription's stream of messages. Receive may be called from several
// goroutines; each message is returned to one of them.
type Consumer interface {
	// Receive blocks until a message is available, ctx ends (ctx.Err()) or the consumer
	// or channel is closed (ErrClosed).
	Receive(ctx context.Context) (Message, error)
	// Len reports how many messages are stored for this subscription and not yet settled
	// by it: those waiting to be received plus those received and not yet acknowledged or
	// released. Messages routed only to other subscriptions never count. Every backend
	// means the same by it; a durable backend may report a value up to a fraction of a
	// second old (jetstream asks its server at most every 100 ms and moves the answer in
	// between by what this process published and acknowledged; kafka adds the records
	// it has not read yet, measured every lag interval and moved in between by what this
	// process produced and fetched), and Len itself never blocks on the network once it
	// has a first answer (jetstream asks in the background; kafka measures in its own loop).
	// It must be cheap between those asks: ingress's backlog bound reads it up to every
	// millisecond. The broker's drain and the sluice_queue_depth metric read it too.
	Len() int
	// Close stops the consumer. Unsettled messages stay stored in durable backends.
	Close() error
}

// Message is one event delivered to one subscription.
type Message interface {
	// Event is the stored event. It is shared: treat it as read-only, Clone to change it.
	Event() *event.Event
	// Ack settles the message: it was delivered or dead-lettered, and will not be seen
	// again by this subscription.
	Ack() error
	// Release gives up on the message without settling it: a durable backend delivers it
	// again later (after a restart, say); a memory channel frees it and reports false,
	// meaning the event is lost and the caller must log and count it.
	Release() (redelivered bool)
}

// Admitter is implemented by channels that can tell cheaply, before a request's body is
// read, that n more bytes cannot be stored now. Ingress uses it to answer 429 to the
// excess of an overload without reading, parsing or copying what it would reject.
type Admitter interface {
	// Admits reports whether n more bytes would fit now. A true answer promises nothing:
	// Publish may still return ErrFull.
	Admits(n int64) bool
}

// Joiner is implemented by consumers that join their subscription asynchronously (a
// Kafka consumer group member): Joined reports whether this consumer has been given its
// share of the subscription (possibly none) at least once. Until every consumer has
// joined, the server's /readyz answers 503, so a replica is not counted in before it
// takes part. Consumers that do not implement it joined when Consume returned.
type Joiner interface {
	Joined() bool
}

// Checker is implemented by channels whose backend can be asked, without storing
// anything, whether it is reachable (a Kafka cluster answering, a NATS connection up).
// The broker asks every few seconds and reports a channel whose Check fails as not ready
// in /status, /readyz and the dashboard, with the reason, until a Check succeeds again.
type Checker interface {
	// Check returns nil when the backend can be reached now, else an error wrapping
	// ErrUnavailable (a *Refusal whose Reason names nothing of the deployment). It
	// returns no later than ctx ends.
	Check(ctx context.Context) error
}

// Durable is implemented by channels whose stored events outlive the process: after a
// crash or a shutdown, what was not settled is delivered again. The broker uses it to
// decide whether Publish may block on I/O (and so gets a publish timeout), whether a
// trigger's dead letters are stored in the channel before the original is settled, and
// whether events left at shutdown are lost (memory) or kept for redelivery (durable).
// A channel that does not implement it is not durable.
type Durable interface {
	// Durable reports true when stored events survive the process.
	Durable() bool
}

// IsDurable reports whether ch keeps its events across a restart (see Durable).
func IsDurable(ch Channel) bool {
	d, ok := ch.(Durable)
	return ok && d.Durable()
}

// Receive is Consumer.Receive for a backend that hands messages out on ready and closes
// closed when the consumer closes: once closed it returns ErrClosed, even with messages
// waiting (they stay stored, unsettled); otherwise it waits for a message or ctx.
func Receive[M Message](ctx context.Context, ready <-chan M, closed <-chan struct{}) (Message, error) {
	select {
	case <-closed:
		return nil, ErrClosed
	default:
	}
	select {
	case m := <-ready:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-closed:
		return nil, ErrClosed
	}
}

// Stored is one event as a Replayer reads it back: the event, when the channel stored it,
// and the subscriptions ingress routed it to then.
type Stored struct {
	Event         *event.Event
	Time          time.Time
	Subscriptions []string
}

// Replayer is implemented by durable channels that keep events after every subscription
// settled them, for a retention period: they can read back what they stored in a window
// of time, whatever it was routed to. The broker's replay (POST /triggers/NS/NAME/replay)
// uses it, re-running the trigger's filter on what it reads.
type Replayer interface {
	// Retention returns how long stored events are kept at least; 0 means for ever.
	Retention(ctx context.Context) (time.Duration, error)
	// Replay streams the events stored at or after from and before to, each in the order
	// it was stored among the events sharing its ordering key. It reads as it yields,
	// never the whole window at once, and stops at the first error (yielded last) or
	// when ctx ends or the caller stops ranging.
	Replay(ctx context.Context, from, to time.Time) iter.Seq2[Stored, error]
}

// StartFrom is where a subscription new to its channel starts, for a Starter. The zero
// value starts with what is published after it exists, like Consume.
type StartFrom struct {
	// Earliest starts at the oldest event the channel still stores.
	Earliest bool
	// Time, when not zero, starts at the events stored at or after it.
	Time time.Time
	// Match reports whether an event stored before the subscription existed (so not
	// routed to it) is one of its own: the broker runs the trigger's filter.
	Match func(Stored) bool
	// Routed, when not nil, is closed once every event published from then on names the
	// subscription when it is one of its own (the broker's routing has it). Until then
	// the catch-up goes on past what was stored when the subscription opened: the events
	// stored between the open and the routing are caught up too. Nil: routed already.
	Routed <-chan struct{}
}

// Latest reports whether s starts with what is published after the subscription exists.
func (s StartFrom) Latest() bool { return !s.Earliest && s.Time.IsZero() }

// Starter is implemented by channels that can start a new subscription in the past: it
// first gets the events stored from its start position up to when it was created (or,
// with from.Routed, up to when it was routed) that Match accepts, then those routed to
// it, as Consume. A subscription that exists in the
// channel already resumes where it stopped, whatever from says. The catch-up survives a
// restart: a subscription that had not caught up when the process died goes on with it.
type Starter interface {
	ConsumeFrom(ctx context.Context, name string, from StartFrom) (Consumer, error)
}

// DLQStorer is implemented by durable channels that keep the dead-letter store
// (package dlq) in their backend: the dead letters of the broker's triggers that have
// no deadLetterSink survive a restart, and every replica sharing the backend sees the
// same store. A broker on a channel that does not implement it keeps them in memory.
type DLQStorer interface {
	// DLQStore returns the store of the channel's broker, bounded per trigger by lim, or
	// an error wrapping ErrNoDLQStore when the channel as configured keeps none.
	DLQStore(ctx context.Context, lim dlq.Limits) (dlq.Store, error)
}
