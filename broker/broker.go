// Package broker is Sluice's data plane above the channels: the HTTP ingress that
// validates, routes and stores events, and the runtime that keeps one dispatcher per
// trigger in step with the configuration as it is reloaded.
//
// Events flow one way: ingress → channel → dispatcher → subscriber; replies come back
// through the same routing path (Broker.ingest).
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/filter"
)

// Broker is one addressable broker or channel (`/<namespace>/<name>`): its channel, the
// routing index of its triggers and their dispatchers. Ingress and replies may use it
// concurrently with a reload.
type Broker struct {
	key      string
	cfg      config.Broker
	isKnBr   bool // a Broker (TTL applies), not a Channel
	isMemory bool // the channel is a memory channel
	ch       channel.Channel
	index    atomic.Pointer[filter.Index]
	log      *slog.Logger
	srv      *Server
	pubWait  time.Duration
	m        brokerMetrics

	mu       sync.Mutex
	triggers map[string]*trigger
}

// trigger is one running subscription: its consumer and dispatcher.
type trigger struct {
	key        string
	cfg        config.Trigger
	consumer   channel.Consumer
	dispatcher *delivery.Dispatcher
	cancel     context.CancelFunc
	done       chan struct{}
}

// scratch is the reusable working space of one ingest: the routes of every event, the
// envelopes handed to Publish (which must not retain them) and where each event's routes
// end.
type scratch struct {
	routes []string
	envs   []channel.Envelope
	ends   []int
}

var scratchPool = sync.Pool{New: func() any { return &scratch{routes: make([]string, 0, 16)} }}

// ingest routes evs to the triggers whose filters match and stores them in the broker's
// channel. It returns nil when every event is stored (or matched nothing); errors wrap
// channel.ErrFull, channel.ErrUnavailable or channel.ErrClosed. unmatched counts the
// events that matched no trigger.
func (b *Broker) ingest(ctx context.Context, evs []*event.Event) (unmatched int, err error) {
	idx := b.index.Load()
	sc := scratchPool.Get().(*scratch)
	for _, e := range evs {
		sc.routes = idx.Route(e, sc.routes)
		sc.ends = append(sc.ends, len(sc.routes))
	}
	start := 0
	for i, e := range evs {
		end := sc.ends[i]
		sc.envs = append(sc.envs, channel.Envelope{Event: e, Subscriptions: sc.routes[start:end:end]})
		if end == start {
			unmatched++
		}
		start = end
	}
	if b.pubWait > 0 && !b.isMemory { // a memory channel never blocks
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.pubWait)
		defer cancel()
	}
	err = b.ch.Publish(ctx, sc.envs)
	clear(sc.routes)
	clear(sc.envs) // drop the event pointers
	sc.routes, sc.envs, sc.ends = sc.routes[:0], sc.envs[:0], sc.ends[:0]
	scratchPool.Put(sc)
	return unmatched, err
}

// reply is the delivery.Replier of the broker's triggers: a reply re-enters through the
// same routing path as an ingested event. The dispatcher has already applied the TTL.
func (b *Broker) reply(ctx context.Context, e *event.Event) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("reply %s: %w", e.ID, err)
	}
	_, err := b.ingest(ctx, []*event.Event{e})
	return err
}

// defaultTTL is delivery.DefaultTTL as an extension value, formatted once.
var defaultTTL = strconv.Itoa(delivery.DefaultTTL)

// stampTTL sets the loop-guard extension on an event that enters from outside and
// rejects one whose TTL is spent.
func stampTTL(e *event.Event) error {
	v, ok := e.Get(delivery.ExtTTL)
	if !ok {
		e.Set(delivery.ExtTTL, defaultTTL)
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return &event.ValidationError{Attribute: delivery.ExtTTL, Reason: fmt.Sprintf("%q is not an integer", v)}
	}
	if n <= 0 {
		return &event.ValidationError{Attribute: delivery.ExtTTL, Reason: "TTL exhausted; the event is looping"}
	}
	return nil
}

// triggerList returns the running triggers sorted by key.
func (b *Broker) triggerList() []*trigger {
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := make([]*trigger, 0, len(b.triggers))
	for _, t := range b.triggers {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].key < ts[j].key })
	return ts
}

// subscriptionName names a trigger's queue in the channel. Triggers of one broker share
// its namespace, but Subscriptions and Triggers are keyed by kind to keep them apart.
func subscriptionName(t config.Trigger) string { return t.Key() }

// deadLetterName names the queue that holds a trigger's dead-lettered events on a
// durable channel, on their way to its dead-letter sink.
func deadLetterName(trigger string) string { return trigger + "/dead-letter" }

// durableDeadLetter reports whether tc's dead-lettered events go through the channel: on
// a durable channel they are stored first, so that a crash between the last failed
// attempt and the sink's answer loses nothing. A memory channel would add nothing.
func (b *Broker) durableDeadLetter(tc config.Trigger) bool {
	return !b.isMemory && tc.Delivery.DeadLetterSink != ""
}

// apply brings the broker's triggers in line with cfg: new ones start, changed ones are
// updated in place, removed ones are drained in the background. The routing index is
// swapped only after every new trigger's queue exists, and before removed ones go, so no
// routed event finds no queue.
func (b *Broker) apply(ctx context.Context, cfg config.Broker) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cfg = cfg
	want := make(map[string]bool, len(cfg.Triggers))
	entries := make([]filter.IndexEntry, 0, len(cfg.Triggers))
	var errs []error
	for _, tc := range cfg.Triggers {
		name := subscriptionName(tc)
		if b.durableDeadLetter(tc) {
			// Its queue first: the trigger's dispatcher may store into it at once.
			dn := deadLetterName(name)
			if err := b.ensure(ctx, dn, tc, b.deadLetterTarget(dn, tc), nil); err != nil {
				errs = append(errs, err)
				continue
			}
			want[dn] = true
		}
		var opts []delivery.Option
		if b.isKnBr {
			opts = append(opts, delivery.WithReplier(b.reply))
		}
		if !b.isMemory {
			opts = append(opts, delivery.WithDeadLetterer(b.storeDeadLetter(name)))
		}
		if err := b.ensure(ctx, name, tc, b.target(tc), opts); err != nil {
			errs = append(errs, err)
			continue
		}
		want[name] = true
		entries = append(entries, filter.IndexEntry{Name: name, Filter: tc.Filter})
	}
	b.index.Store(filter.NewIndex(entries))
	for name, t := range b.triggers {
		if !want[name] {
			delete(b.triggers, name)
			go b.retire(t)
		}
	}
	return errors.Join(errs...)
}

// ensure starts the dispatcher of the queue called name toward target, or updates the
// running one if its trigger changed. Called with b.mu held.
func (b *Broker) ensure(ctx context.Context, name string, tc config.Trigger, target delivery.Target, opts []delivery.Option) error {
	if t, ok := b.triggers[name]; ok {
		if !t.cfg.Equal(tc) {
			t.cfg = tc
			t.dispatcher.Update(target)
			b.log.Info("trigger updated", "broker", b.key, "trigger", name)
		}
		return nil
	}
	t, err := b.startTrigger(ctx, name, tc, target, opts)
	if err != nil {
		return err
	}
	b.triggers[name] = t
	b.log.Info("trigger started", "broker", b.key, "trigger", name, "subscriber", target.URL)
	return nil
}

// storeDeadLetter is the DeadLetterer of a trigger on a durable channel: it writes the
// dead-letter event to the trigger's dead-letter queue.
func (b *Broker) storeDeadLetter(trigger string) delivery.DeadLetterer {
	route := []string{deadLetterName(trigger)}
	return func(ctx context.Context, e *event.Event) error {
		return b.ch.Publish(ctx, []channel.Envelope{{Event: e, Subscriptions: route}})
	}
}

func (b *Broker) target(tc config.Trigger) delivery.Target {
	d := tc.Delivery
	policy := delivery.Policy{
		Retry: d.Retry, Delay: d.BackoffDelay, Timeout: d.Timeout,
		RetryAfterMax: d.RetryAfterMax, DeadLetterSink: d.DeadLetterSink,
		Backoff: delivery.Exponential,
	}
	if d.BackoffPolicy == "linear" {
		policy.Backoff = delivery.Linear
	}
	return delivery.Target{
		Name: tc.Key(), URL: tc.Subscriber, ReplyURL: tc.Reply, Policy: policy,
		Ordered: tc.Ordered, MaxInFlight: b.srv.opts.maxInFlight,
	}
}

// deadLetterTarget delivers a trigger's stored dead-letter events to its sink, with the
// trigger's retry policy and no sink of its own: what the sink refuses is undeliverable
// (logged and counted).
func (b *Broker) deadLetterTarget(name string, tc config.Trigger) delivery.Target {
	t := b.target(tc)
	t.Name, t.URL, t.ReplyURL, t.Ordered = name, tc.Delivery.DeadLetterSink, "", false
	t.Policy.DeadLetterSink = ""
	return t
}

func (b *Broker) startTrigger(ctx context.Context, name string, tc config.Trigger, target delivery.Target, extra []delivery.Option) (*trigger, error) {
	cons, err := b.ch.Consume(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("trigger %s: opening its queue: %w", name, err)
	}
	opts := append([]delivery.Option{
		delivery.WithClient(b.srv.client),
		delivery.WithLogger(b.log.With("broker", b.key)),
		delivery.WithMetrics(b.srv.deliveryMetrics),
		delivery.WithAdaptive(!b.srv.opts.fixedInFlight),
	}, extra...)
	d := delivery.NewDispatcher(cons, target, opts...)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &trigger{key: name, cfg: tc, consumer: cons, dispatcher: d, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		if err := d.Run(rctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, channel.ErrClosed) {
			b.log.Error("dispatcher stopped", "trigger", name, "err", err)
		}
	}()
	return t, nil
}

// retire drains a removed trigger's queue to its subscriber for up to the shutdown
// timeout, then deletes the queue, logging what was left undelivered.
func (b *Broker) retire(t *trigger) {
	ctx, cancel := context.WithTimeout(context.Background(), b.srv.opts.shutdownTimeout)
	defer cancel()
	left := t.dispatcher.Drain(ctx)
	t.cancel()
	<-t.done
	if err := b.ch.Remove(ctx, t.key); err != nil {
		b.log.Error("trigger removed with events left", "trigger", t.key, "err", err)
	}
	b.srv.deliveryMetrics.Forget(t.key)
	if left > 0 {
		b.log.Error("trigger removed before its queue drained", "trigger", t.key, "undelivered", left)
	} else {
		b.log.Info("trigger removed", "trigger", t.key)
	}
}

// durableGrace bounds how long a durable channel's dispatchers keep delivering on
// shutdown: what they have not delivered by then stays stored and is delivered after a
// restart, so there is no reason to hold the shutdown for the whole backlog.
const durableGrace = 2 * time.Second

// drain delivers what is queued for every trigger until ctx ends (a memory channel) or
// for durableGrace at most (a durable one), then stops them and closes the channel. It
// returns how many events were left undelivered and are lost: events left in a durable
// channel are logged as kept for redelivery, not counted.
func (b *Broker) drain(ctx context.Context) int {
	if !b.isMemory {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, durableGrace)
		defer cancel()
	}
	ts := b.triggerList()
	var left atomic.Int64
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := t.dispatcher.Drain(ctx)
			t.cancel()
			<-t.done
			left.Add(int64(n))
		}()
	}
	wg.Wait()
	if err := b.ch.Close(); err != nil {
		b.log.Error("closing channel", "broker", b.key, "err", err)
	}
	if !b.isMemory {
		if n := left.Load(); n > 0 {
			b.log.Info("events kept in the durable channel for delivery after a restart", "broker", b.key, "events", n)
		}
		return 0
	}
	return int(left.Load())
}
