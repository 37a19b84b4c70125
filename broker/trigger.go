package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/filter"
	"github.com/sluice-broker/sluice/internal/redact"
)

// trigger is one running subscription: its consumer and dispatcher. Its dispatcher runs
// on a goroutine of the broker's runs group; done is closed when it returns.
type trigger struct {
	key        string
	cfg        config.Trigger
	url        string // where it delivers (subscriber or dead-letter sink)
	consumer   channel.Consumer
	feed       *replayFeed // what the dispatcher reads: consumer, and a replay's events (replay.go)
	dispatcher *delivery.Dispatcher
	cancel     context.CancelFunc
	done       chan struct{}
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
	return b.durable && tc.Delivery.DeadLetterSink != ""
}

// apply brings the broker's triggers in line with cfg: new ones start, changed ones are
// updated in place, removed ones retire in the background. The routing index is swapped
// only after every new trigger's queue exists, and before removed ones go, so no routed
// event finds no queue. Called by Server.Apply only, never concurrently with drain.
func (b *Broker) apply(ctx context.Context, cfg config.Broker) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cfg = cfg
	b.gate.SetRate(cfg.MaxRate)
	b.setDedup(cfg.DedupWindow)
	// Closed once the index routes to the triggers started below and every event the old
	// one routed is stored: a catch-up (start-from, a re-created trigger) goes on up to
	// then, so that nothing stored before is missed.
	routed := make(chan struct{})
	want := make(map[string]bool, len(cfg.Triggers))
	entries := make([]filter.IndexEntry, 0, len(cfg.Triggers))
	var errs []error
	for _, tc := range cfg.Triggers {
		name := subscriptionName(tc)
		target, err := b.target(tc)
		if err != nil {
			errs = append(errs, fmt.Errorf("trigger %s: %w", name, err))
			continue
		}
		if b.durableDeadLetter(tc) {
			// Its queue first: the trigger's dispatcher may store into it at once.
			dn := deadLetterName(name)
			if err := b.ensure(ctx, dn, tc, deadLetterTarget(dn, tc, target, b.srv.opts.maxInFlight), nil, routed); err != nil {
				errs = append(errs, err)
				continue
			}
			want[dn] = true
		}
		var opts []delivery.Option
		if b.isKnBr {
			opts = append(opts, delivery.WithReplier(b.replier(tc)))
		}
		if b.durable {
			opts = append(opts, delivery.WithDeadLetterer(b.storeDeadLetter(name)))
		}
		if b.dl.store != nil { // used when it has no deadLetterSink (dlq.go)
			opts = append(opts, delivery.WithDLQ(b.keepDead(name)))
		}
		if err := b.ensure(ctx, name, tc, target, opts, routed); err != nil {
			errs = append(errs, err)
			continue
		}
		want[name] = true
		entries = append(entries, filter.IndexEntry{Name: name, Filter: tc.Filter})
	}
	old, prev := b.swapRouting(filter.NewIndex(entries)), b.routed
	b.routed = routed
	b.runs.Go(func() { // closed once every event an older index routed is stored
		if prev != nil {
			select { // the index before the old one, and those before it
			case <-prev:
			case <-b.srv.life.Done():
			}
		}
		old.waitIdle(b.srv.life)
		close(routed)
	})
	for name, t := range b.triggers {
		if !want[name] {
			delete(b.triggers, name)
			b.forgetPause(name)
			lv := &leaving{t: t, removed: make(chan struct{})}
			if b.leaving == nil {
				b.leaving = map[string]*leaving{}
			}
			b.leaving[name] = lv
			b.retiring.start(func() int { return b.retire(lv) })
		}
	}
	live := b.sortedTriggers()
	b.live.Store(&live)
	return errors.Join(errs...)
}

// ensure starts the dispatcher of the queue called name toward target, or updates the
// running one if its trigger changed; routed is closed once the routing index has it.
// Called with b.mu held.
func (b *Broker) ensure(ctx context.Context, name string, tc config.Trigger, target delivery.Target, opts []delivery.Option, routed <-chan struct{}) error {
	own := name == subscriptionName(tc) // not its dead-letter queue, which is never paused
	if t, ok := b.triggers[name]; ok {
		if !t.cfg.Equal(tc) {
			if own && t.cfg.Paused != tc.Paused { // paused while the annotation or the API says so
				setPaused(t.dispatcher, tc.Paused || b.apiPaused(name))
			}
			t.cfg, t.url = tc, target.URL
			t.dispatcher.Update(target)
			b.log.Info("trigger updated", "broker", b.key, "trigger", name)
		}
		return nil
	}
	after := b.reclaim(name)
	if !tc.Ordered {
		after = nil // both dispatchers may take from the queue: no order to keep
	}
	t, err := b.startTrigger(ctx, name, tc, target, opts, start{paused: own && (tc.Paused || b.apiPaused(name)), after: after, routed: routed})
	if err != nil {
		return err
	}
	b.triggers[name] = t
	b.log.Info("trigger started", "broker", b.key, "trigger", name, "subscriber", redact.URL(target.URL))
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

// target is the delivery target of tc.
func (b *Broker) target(tc config.Trigger) (delivery.Target, error) {
	d := tc.Delivery
	backoff, ok := delivery.ParseBackoffPolicy(d.BackoffPolicy)
	if !ok {
		return delivery.Target{}, fmt.Errorf("delivery.backoffPolicy %q: want linear or exponential", d.BackoffPolicy)
	}
	return delivery.Target{
		Name: tc.Key(), URL: tc.Subscriber, ReplyURL: tc.Reply,
		Policy: delivery.Policy{
			Retry: d.Retry, Delay: d.BackoffDelay, Backoff: backoff, Timeout: d.Timeout,
			RetryAfterMax: d.RetryAfterMax, DeadLetterSink: d.DeadLetterSink,
		},
		Ordered: tc.Ordered, MaxInFlight: b.maxInFlight(tc), MaxDeliveryRate: tc.Caps.Rate, HeaderEncoding: headerEncoding(b.cfg),
		CACerts: tc.SubscriberCACerts, Audience: tc.SubscriberAudience,
		DeadLetterCACerts: d.DeadLetterSinkCACerts, DeadLetterAudience: d.DeadLetterSinkAudience,
		Batch: tc.Batch, BatchWait: tc.BatchWait, Structured: d.Format == config.FormatJSON,
	}, nil
}

// maxInFlight is the ceiling of tc's in-flight limit: its sluice.dev/max-in-flight, never
// above the server's --max-in-flight.
func (b *Broker) maxInFlight(tc config.Trigger) int {
	if n := tc.Caps.InFlight; n > 0 {
		return min(n, b.srv.opts.maxInFlight)
	}
	return b.srv.opts.maxInFlight
}

// deadLetterTarget delivers a trigger's stored dead-letter events to its sink, with the
// trigger's retry policy and no sink of its own: what the sink refuses is undeliverable
// (logged and counted). The trigger's caps (sluice.dev/max-in-flight and
// max-delivery-rate) are its subscriber's: the sink gets the server's in-flight limit.
func deadLetterTarget(name string, tc config.Trigger, t delivery.Target, maxInFlight int) delivery.Target {
	t.Name, t.URL, t.ReplyURL, t.Ordered = name, tc.Delivery.DeadLetterSink, "", false
	t.MaxInFlight, t.MaxDeliveryRate = maxInFlight, 0
	t.CACerts, t.Audience = tc.Delivery.DeadLetterSinkCACerts, tc.Delivery.DeadLetterSinkAudience
	t.Batch, t.BatchWait = 0, 0 // dead letters go one by one
	t.Policy.DeadLetterSink, t.DeadLetterCACerts, t.DeadLetterAudience = "", "", ""
	return t
}

// start is how startTrigger starts a dispatcher.
type start struct {
	paused bool            // sluice.dev/paused, or paused through the API
	after  <-chan struct{} // closed once the previous dispatcher of the queue returned; nil: none
	routed <-chan struct{} // closed once the routing index has the trigger
}

// startTrigger opens the queue called name and starts its dispatcher on a goroutine of
// b.runs, paused if st.paused. Its context is the server's life, not ctx (a reload's):
// it runs until stopped. Its dispatcher runs once st.after is closed (nil: at once): the
// previous dispatcher of the same queue, still settling what it held, has returned (an
// ordered trigger).
func (b *Broker) startTrigger(ctx context.Context, name string, tc config.Trigger, target delivery.Target, extra []delivery.Option, st start) (*trigger, error) {
	cons, err := b.consume(ctx, name, tc, st.routed) // replay.go: sluice.dev/start-from
	if err != nil {
		return nil, fmt.Errorf("trigger %s: opening its queue: %w", name, err)
	}
	opts := append([]delivery.Option{
		delivery.WithClient(b.srv.client),
		delivery.WithLogger(b.log.With("broker", b.key)),
		delivery.WithMetrics(b.srv.deliveryMetrics),
		delivery.WithAdaptive(!b.srv.opts.overload.FixedInFlight),
		delivery.WithTracer(b.srv.opts.tracer),
		delivery.WithDeadLetterHook(b.srv.opts.deadLetters),
		delivery.WithTokenSource(b.srv.opts.tokens),
		delivery.WithMaxReplyBytes(b.srv.opts.maxEventBytes), // a reply is held to an event's bound
	}, extra...)
	if ids := b.srv.opts.identities; ids != nil {
		// Its sends to this server carry the trigger's identity (a dead-letter queue's,
		// those of the trigger it belongs to).
		_, authz := ids.Sender(tc.Kind, tc.Namespace, tc.Name)
		opts = append(opts, delivery.WithOwnIngress(b.srv.opts.ownOrigin, authz))
	}
	feed := newReplayFeed(cons)
	d := delivery.NewDispatcher(feed, target, opts...)
	if st.paused {
		d.Pause()
	}
	rctx, cancel := context.WithCancel(b.srv.life)
	t := &trigger{key: name, cfg: tc, url: target.URL, consumer: cons, feed: feed, dispatcher: d, cancel: cancel, done: make(chan struct{})}
	b.runs.Go(func() {
		defer close(t.done)
		if st.after != nil {
			select { // one dispatcher at a time on an ordered trigger's queue
			case <-st.after:
			case <-rctx.Done():
				return
			}
		}
		if err := d.Run(rctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, channel.ErrClosed) {
			b.log.Error("dispatcher stopped", "trigger", name, "err", err)
		}
	})
	return t, nil
}

// stop drains t's dispatcher until ctx ends and waits for it to return. It returns how
// many messages the dispatcher released unsettled.
func (t *trigger) stop(ctx context.Context) int {
	n := t.dispatcher.Drain(ctx)
	t.cancel()
	<-t.done
	return n
}

// forget drops what the server keeps of a trigger that is gone: its metrics series and
// its idle connections.
func (t *trigger) forget(s *Server) {
	s.deliveryMetrics.Forget(t.key)
	// The subscriber may be gone for good: its idle keep-alive connections go now, not
	// after the idle timeout (another trigger delivering there simply dials again).
	delivery.CloseIdleTo(s.client, t.url)
}

// removeTimeout bounds the deletion of a retired trigger's queue in the backend.
const removeTimeout = 10 * time.Second

// leaving is a trigger a reload removed, while its retirement runs. If a reload adds it
// back first, the new trigger reclaims it: the old dispatcher stops receiving, settles
// what it holds and leaves the queue, with what is still stored, to the new one.
// Its fields are guarded by the broker's mu.
type leaving struct {
	t         *trigger
	reclaimed bool          // added back: the queue stays
	removing  bool          // past the point where it can be reclaimed: the queue goes
	removed   chan struct{} // closed once the queue is deleted and the trigger forgotten
}

// reclaim prepares the start of the trigger called name: if a reload removed it and its
// retirement still runs, the retirement keeps its queue, and reclaim returns the channel
// closed when the old dispatcher has returned (an ordered trigger starts after it). If the
// retirement is already deleting the queue, reclaim waits for that (bounded by
// removeTimeout), so that the new trigger opens a new queue rather than the closing one.
// It returns nil when nothing of that name is leaving. Called with b.mu held.
func (b *Broker) reclaim(name string) <-chan struct{} {
	lv := b.leaving[name]
	if lv == nil {
		return nil
	}
	if lv.removing {
		<-lv.removed
		delete(b.leaving, name)
		return nil
	}
	lv.reclaimed = true
	delete(b.leaving, name)
	lv.t.dispatcher.StopReceiving()
	return lv.t.done
}

// retire drains a removed trigger's queue to its subscriber for up to the shutdown
// timeout, then deletes the queue. It returns how many deliveries were lost: what the
// dispatcher held and what was still queued (on a durable channel, the subscription's
// lag as the backend reports it). A trigger added back meanwhile (reclaim) keeps the
// queue and what it stores: only what the old dispatcher released is lost.
func (b *Broker) retire(lv *leaving) int {
	t := lv.t
	// The shutdown timeout bounds the drain, unless the trigger is added back first: then
	// what the old dispatcher holds is the trigger's again, settled by its delivery policy
	// (a memory channel would lose it if released), and only the server's end bounds it.
	ctx, cancel := context.WithCancel(b.srv.life)
	defer cancel()
	deadline := time.AfterFunc(b.srv.opts.shutdownTimeout, func() {
		b.mu.Lock()
		reclaimed := lv.reclaimed
		b.mu.Unlock()
		if !reclaimed {
			cancel()
		}
	})
	defer deadline.Stop()
	left := t.stop(ctx)
	b.mu.Lock()
	reclaimed := lv.reclaimed
	lv.removing = !reclaimed
	b.mu.Unlock()
	if reclaimed {
		if left > 0 && !b.durable {
			b.log.Error("trigger removed and added back: events its old dispatcher held were released", "trigger", t.key, "undelivered", left)
		} else {
			b.log.Info("trigger removed and added back before its retirement ended: it keeps its queue", "trigger", t.key)
		}
		if b.durable {
			return 0 // released messages stay stored, for the new dispatcher
		}
		return left
	}
	if b.durable { // released messages are part of the backend's lag
		left = max(left, t.consumer.Len())
	} else {
		left += t.consumer.Len()
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer rcancel()
	if err := b.ch.Remove(rctx, t.key); err != nil {
		b.log.Warn("removing the trigger's queue", "trigger", t.key, "err", err)
	}
	t.forget(b.srv)
	// A reload adding it back waits for this, holding b.mu: close first, then lock.
	close(lv.removed)
	b.mu.Lock()
	if b.leaving[t.key] == lv {
		delete(b.leaving, t.key)
	}
	b.mu.Unlock()
	b.forgetDLQ(t.key) // dlq.go: it takes b.mu; the dead letters stay if the trigger runs again
	if left > 0 {
		b.log.Error("trigger removed before its queue drained", "trigger", t.key, "undelivered", left)
	} else {
		b.log.Info("trigger removed", "trigger", t.key)
	}
	return left
}
