package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/filter"
)

// Replay bounds and defaults (POST /triggers/NS/NAME/replay).
const (
	// ReplayExtension is the CloudEvents extension every replayed delivery carries; its
	// value is the replay's id (ReplayProgress.ID).
	ReplayExtension = "sluicereplay"
	// DefaultReplayRate is a replay's rate in events a second when the request names none.
	DefaultReplayRate = 100
	// MaxReplayRate bounds a replay's rate parameter.
	MaxReplayRate = 10000
	// replayQueue is how many replayed events wait for the trigger's dispatcher at most:
	// with the dispatcher's own bound on held messages, all a replay holds in memory.
	replayQueue = 64
	// replayProgressEvery is how often a replay writes a progress line.
	replayProgressEvery = time.Second
	// replayWriteWait bounds the write of one progress line to the client.
	replayWriteWait = 30 * time.Second
)

// ReplayProgress is one line of the answer of POST /triggers/NS/NAME/replay (newline-
// delimited JSON): a line every second while the replay runs, and a last one with Done.
type ReplayProgress struct {
	// Trigger is "namespace/name".
	Trigger string `json:"trigger"`
	// ID is the value of the sluicereplay extension of this replay's deliveries.
	ID string `json:"id"`
	// Read counts the stored events of the window read so far.
	Read int64 `json:"read"`
	// Matched counts those that passed the trigger's filter and were handed to its
	// dispatcher.
	Matched int64 `json:"matched"`
	// Delivered counts those settled: delivered, or dead-lettered under the trigger's
	// delivery spec.
	Delivered int64 `json:"delivered"`
	// Done is set on the last line.
	Done bool `json:"done,omitempty"`
	// Complete is set on the last line when every event of the window that passed the
	// filter was delivered (or dead-lettered).
	Complete bool `json:"complete,omitempty"`
	// Error says why an incomplete replay stopped.
	Error string `json:"error,omitempty"`
}

// replayFeed is the consumer a trigger's dispatcher reads: its channel consumer, with
// the events of a running replay merged in. Receive takes a waiting replayed event
// first; a Receive blocked on the channel is woken when one is queued: it waits with a
// child of its context that push cancels. The child is kept from one Receive to the
// next (the dispatcher passes the same context until it pauses), so that a message taken
// from the channel costs no context of its own.
type replayFeed struct {
	channel.Consumer
	queue chan channel.Message
	busy  atomic.Bool // a replay runs

	mu     sync.Mutex
	parent context.Context    // the context child derives from
	child  context.Context    // what Receive waits on the channel with
	wake   context.CancelFunc // cancels child
}

func newReplayFeed(c channel.Consumer) *replayFeed {
	return &replayFeed{Consumer: c, queue: make(chan channel.Message, replayQueue)}
}

// Receive returns a replayed event if one waits, else the channel's next message.
func (f *replayFeed) Receive(ctx context.Context) (channel.Message, error) {
	for {
		select {
		case m := <-f.queue:
			return m, nil
		default:
		}
		rctx := f.waitContext(ctx)
		select { // one queued between the look above and rctx: its push cancels rctx or came before
		case m := <-f.queue:
			return m, nil
		default:
		}
		m, err := f.Consumer.Receive(rctx)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			continue // woken by a replayed event
		}
		return m, err
	}
}

// waitContext returns the child of ctx that push cancels, making a new one when ctx is
// not the last one's parent or push cancelled it.
func (f *replayFeed) waitContext(ctx context.Context) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.child == nil || f.parent != ctx || f.child.Err() != nil {
		if f.wake != nil {
			f.wake() // the old child goes
		}
		f.parent = ctx
		f.child, f.wake = context.WithCancel(ctx)
	}
	return f.child
}

// push queues m for the dispatcher, waiting for room (the dispatcher is paused, at its
// caps, or behind) until ctx ends.
func (f *replayFeed) push(ctx context.Context, m channel.Message) error {
	select {
	case f.queue <- m:
	case <-ctx.Done():
		return ctx.Err()
	}
	f.mu.Lock()
	if f.wake != nil {
		f.wake()
	}
	f.mu.Unlock()
	return nil
}

// Len is the channel's count plus the replayed events waiting.
func (f *replayFeed) Len() int { return f.Consumer.Len() + len(f.queue) }

// replayRun counts one replay's deliveries.
type replayRun struct {
	read, matched, delivered, released atomic.Int64
	settled                            chan struct{} // signalled at each settlement
}

// replayed is one replayed event handed to the trigger's dispatcher.
type replayed struct {
	run  *replayRun
	ev   *event.Event
	done atomic.Bool
}

func (m *replayed) Event() *event.Event { return m.ev }

// Ack counts the event delivered (or dead-lettered).
func (m *replayed) Ack() error {
	if m.done.CompareAndSwap(false, true) {
		m.run.delivered.Add(1)
		m.run.signal()
	}
	return nil
}

// Release counts the event not delivered by this replay. It reports true: the event
// stays stored in the channel, for another replay.
func (m *replayed) Release() bool {
	if m.done.CompareAndSwap(false, true) {
		m.run.released.Add(1)
		m.run.signal()
	}
	return true
}

func (r *replayRun) signal() {
	select {
	case r.settled <- struct{}{}:
	default:
	}
}

func (r *replayRun) progress(key, id string) ReplayProgress {
	return ReplayProgress{Trigger: key, ID: id, Read: r.read.Load(), Matched: r.matched.Load(), Delivered: r.delivered.Load()}
}

// replayParams are a replay request's parameters.
type replayParams struct {
	from, to time.Time
	rate     float64
}

// parseReplay reads the query parameters from (RFC 3339, required), to (RFC 3339,
// default now) and rate (events a second, default DefaultReplayRate, at most
// MaxReplayRate). Errors name the parameter.
func parseReplay(r *http.Request, now time.Time) (replayParams, error) {
	q := r.URL.Query()
	p := replayParams{to: now, rate: DefaultReplayRate}
	v := q.Get("from")
	if v == "" {
		return p, errors.New("from: missing; want an RFC 3339 time such as 2026-01-02T15:04:05Z")
	}
	var err error
	if p.from, err = time.Parse(time.RFC3339, v); err != nil {
		return p, fmt.Errorf("from: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", v)
	}
	if v := q.Get("to"); v != "" {
		if p.to, err = time.Parse(time.RFC3339, v); err != nil {
			return p, fmt.Errorf("to: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", v)
		}
		// A replay reads what was stored before it started: a window open into the future
		// would never end under steady traffic, and deliver live events as replayed.
		p.to = earliest(p.to, now)
	}
	if !p.from.Before(p.to) {
		return p, fmt.Errorf("from: %s is not before to (%s)", p.from.Format(time.RFC3339), p.to.Format(time.RFC3339))
	}
	if v := q.Get("rate"); v != "" {
		p.rate, err = strconv.ParseFloat(v, 64)
		if err != nil || !(p.rate > 0 && p.rate <= MaxReplayRate) {
			return p, fmt.Errorf("rate: %q: want events a second above 0 up to %d", v, MaxReplayRate)
		}
	}
	return p, nil
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// findRunning returns the broker running the trigger or subscription key, and the
// trigger, or nils.
func (s *Server) findRunning(key string) (*Broker, *trigger) {
	for _, b := range s.snapshot() {
		b.mu.Lock()
		t := b.triggers[key]
		b.mu.Unlock()
		if t != nil {
			return b, t
		}
	}
	return nil, nil
}

// serveReplay answers POST /triggers/NS/NAME/replay: it re-delivers the trigger's events
// stored in [from, to) that pass its filter, through its dispatcher (its delivery spec,
// caps and pause), each marked with the sluicereplay extension, at most rate a second.
// It answers 400 naming a bad parameter, on a channel that keeps no delivered events, or
// for a window that starts before the channel's retention; 403 without an operator
// token; 404 for an unknown trigger; 409 while another replay of the trigger runs. Then
// it streams ReplayProgress lines until the last. A replay stops, incomplete, when the
// client goes away or the server shuts down; it is not resumed: the events stay stored,
// and the last line (if the client gets it) says how many were delivered.
func (s *Server) serveReplay(w http.ResponseWriter, r *http.Request, ns, name string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, r.Method+" is not allowed; POST to replay a trigger", http.StatusMethodNotAllowed)
		return
	}
	if !s.opts.opsGuarded {
		http.Error(w, "replay is off: this server has no operator token; start it with --ops-token-file to replay triggers", http.StatusForbidden)
		return
	}
	key := ns + "/" + name
	b, t := s.findRunning(key)
	if t == nil || ns == "" || name == "" {
		http.Error(w, "trigger "+key+": "+errNoTrigger.Error(), http.StatusNotFound)
		return
	}
	now := time.Now()
	p, err := parseReplay(r, now)
	if err != nil {
		http.Error(w, "replay of trigger "+key+": "+err.Error(), http.StatusBadRequest)
		return
	}
	rp, ok := b.ch.(channel.Replayer)
	if !ok {
		http.Error(w, "replay of trigger "+key+": broker "+b.key+"'s channel does not replay: "+b.chName+" keeps no delivered events to read back; replay needs the jetstream, kafka or kinesis channel with the broker's sluice.dev/retention", http.StatusBadRequest)
		return
	}
	ret, err := rp.Retention(r.Context())
	if errors.Is(err, channel.ErrNotKept) {
		http.Error(w, "replay of trigger "+key+": broker "+b.key+"'s channel does not replay: it keeps no delivered events without the broker's sluice.dev/retention", http.StatusBadRequest)
		return
	}
	if err != nil {
		s.log.Warn("replay: reading the channel's retention", "trigger", key, "err", err)
		http.Error(w, "replay of trigger "+key+": the channel cannot say its retention now; try again later", http.StatusServiceUnavailable)
		return
	}
	if ret > 0 && p.from.Before(now.Add(-ret)) {
		http.Error(w, fmt.Sprintf("replay of trigger %s: from: %s is beyond the channel's retention of %s: events stored before %s may be gone",
			key, p.from.Format(time.RFC3339), ret, now.Add(-ret).Format(time.RFC3339)), http.StatusBadRequest)
		return
	}
	if !t.feed.busy.CompareAndSwap(false, true) {
		http.Error(w, "replay of trigger "+key+": another replay of it is running; wait for it to end", http.StatusConflict)
		return
	}
	defer t.feed.busy.Store(false)

	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.life, func() { cancel(errors.New("the server is shutting down")) })
	defer stop()
	go func() { // a trigger removed by a reload takes nothing more
		select {
		case <-t.done:
			cancel(errors.New("the trigger stopped (removed by a reload, or the server is shutting down)"))
		case <-ctx.Done():
		}
	}()
	id := now.UTC().Format("20060102T150405.000Z")
	run := &replayRun{settled: make(chan struct{}, 1)}
	s.log.Info("replay started", "trigger", key, "id", id, "from", p.from, "to", p.to, "rate", p.rate, "remote", r.RemoteAddr)

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(pr ReplayProgress) {
		_ = rc.SetWriteDeadline(time.Now().Add(replayWriteWait))
		if enc.Encode(pr) == nil {
			_ = rc.Flush()
		}
	}
	send(run.progress(key, id))

	readErr := make(chan error, 1)
	b.mu.Lock()
	f := t.cfg.Filter // as the trigger is now: a reload during the replay does not change it
	b.mu.Unlock()
	go func() { readErr <- replayWindow(ctx, rp, t, f, run, p, id) }()
	tick := time.NewTicker(replayProgressEvery)
	defer tick.Stop()
	var rerr error
	reading := true
	for {
		if !reading && run.delivered.Load()+run.released.Load() >= run.matched.Load() {
			break
		}
		select {
		case rerr = <-readErr:
			reading = false
			continue
		case <-run.settled:
			continue
		case <-tick.C:
			send(run.progress(key, id))
			continue
		case <-ctx.Done():
		}
		if reading {
			rerr = <-readErr
		}
		break
	}
	for { // what the dispatcher has not taken is not delivered by this replay
		select {
		case m := <-t.feed.queue:
			m.Release()
			continue
		default:
		}
		break
	}
	last := run.progress(key, id)
	last.Done = true
	switch {
	case ctx.Err() != nil:
		last.Error = "stopped before every event was delivered: " + context.Cause(ctx).Error()
	case rerr != nil:
		last.Error = rerr.Error()
	case run.released.Load() > 0:
		last.Error = fmt.Sprintf("%d events were handed back undelivered (the trigger stopped)", run.released.Load())
	default:
		last.Complete = true
	}
	s.log.Info("replay ended", "trigger", key, "id", id, "read", last.Read, "matched", last.Matched,
		"delivered", last.Delivered, "complete", last.Complete, "err", last.Error)
	send(last)
}

// replayWindow reads the window from rp and hands each stored event that passes f (t's
// filter) to t's dispatcher, paced to p.rate. Events routed only to dead-letter queues
// are not the trigger's events and are skipped.
func replayWindow(ctx context.Context, rp channel.Replayer, t *trigger, f filter.Filter, run *replayRun, p replayParams, id string) error {
	interval := time.Duration(float64(time.Second) / p.rate)
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for st, err := range rp.Replay(ctx, p.from, p.to) {
		if err != nil {
			return err
		}
		run.read.Add(1)
		if deadLetterOnly(st.Subscriptions) {
			continue
		}
		if f != nil && !f.Match(st.Event) {
			continue
		}
		if wait := time.Until(next); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if floor := time.Now().Add(-time.Second); next.Before(floor) {
			next = floor // after a stall (a pause, a slow subscriber), a burst of a second at most
		}
		next = next.Add(interval)
		ev := st.Event.Clone()
		ev.Set(ReplayExtension, id)
		if err := t.feed.push(ctx, &replayed{run: run, ev: ev}); err != nil {
			return err
		}
		run.matched.Add(1)
	}
	return nil
}

// deadLetterOnly reports whether subs names dead-letter queues only (and at least one).
func deadLetterOnly(subs []string) bool {
	for _, s := range subs {
		if !strings.HasSuffix(s, deadLetterName("")) {
			return false
		}
	}
	return len(subs) > 0
}

// consume opens the queue called name of trigger tc. On a channel that can start in the
// past (channel.Starter) a trigger new to it starts where its sluice.dev/start-from
// says, and one re-created with a removed trigger's name resumes where that one stopped,
// both re-running its filter on the events stored before it existed; elsewhere a
// start-from other than latest is refused. A dead-letter queue always opens as Consume.
// routed is closed once the routing index has the trigger: the catch-up goes on up to
// then (channel.StartFrom.Routed).
func (b *Broker) consume(ctx context.Context, name string, tc config.Trigger, routed <-chan struct{}) (channel.Consumer, error) {
	st, ok := b.ch.(channel.Starter)
	if name != subscriptionName(tc) || !ok && tc.StartFrom.Latest() {
		return b.ch.Consume(ctx, name)
	}
	if !ok {
		return nil, fmt.Errorf("metadata.annotations.sluice.dev/start-from: %s: not on this broker's channel: starting in the past needs the kafka or kinesis channel, or the jetstream channel with sluice.dev/retention", tc.StartFrom)
	}
	f := tc.Filter
	return st.ConsumeFrom(ctx, name, channel.StartFrom{
		Earliest: tc.StartFrom.Earliest, Time: tc.StartFrom.Time, Routed: routed,
		Match: func(s channel.Stored) bool {
			return !deadLetterOnly(s.Subscriptions) && (f == nil || f.Match(s.Event))
		},
	})
}
