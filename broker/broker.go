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
	"github.com/sluice-broker/sluice/internal/ratelog"
	"github.com/sluice-broker/sluice/overload"
)

// Broker is one addressable broker or channel (`/<namespace>/<name>`): its channel, the
// routing index of its triggers and their dispatchers. Ingress and replies may use it
// concurrently with a reload.
//
// Goroutines: the broker owns one per trigger running its dispatcher (runs) and one per
// trigger a reload removed while it drains (retiring); drain waits for both.
type Broker struct {
	key     string
	isKnBr  bool // a Broker (TTL applies), not a Channel
	durable bool // channel.IsDurable(ch): stored events outlive the process
	ch      channel.Channel
	chName  string                  // "the NAME channel" it runs on, or the server's default, for messages
	routing atomic.Pointer[routing] // the routing index, swapped by apply (routing.go)
	routed  <-chan struct{}         // closed once every event the indexes before the current one routed is stored; guarded by mu
	log     *slog.Logger
	refused *ratelog.Logger // requests refused: not stored by the channel (ingress.go), unauthorized (authorize.go)
	srv     *Server
	pubWait time.Duration // publish timeout; 0 on a memory channel, which never blocks
	m       brokerMetrics
	dedup   atomic.Pointer[dedupWindow] // sluice.dev/dedup-window; nil: off (dedup.go)
	gate    *overload.Gate              // admission under overload, sluice.dev/max-rate (package overload; fairshare.go)
	health  storeHealth                 // whether the channel can store now (health.go)
	dl      dlqState                    // the dead-letter store and its redrives (dlq.go)
	ps      pauseState                  // the triggers' API pauses (pausestate.go)

	cfg      config.Broker // written by apply only (under the server's applyMu)
	runs     sync.WaitGroup
	retiring retirements

	mu       sync.Mutex
	triggers map[string]*trigger
	leaving  map[string]*leaving // triggers a reload removed, until their retirement ends (trigger.go)
	// live is triggers as apply left them, sorted by key: the backlog verdict reads it on
	// the ingress path every millisecond, without b.mu, a copy or a sort (Backlogged).
	live atomic.Pointer[[]*trigger]
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
	rt := b.acquireRouting()
	defer rt.release() // once stored: a swap waits for it (routing.go)
	sc := scratchPool.Get().(*scratch)
	for _, e := range evs {
		sc.routes = rt.idx.Route(e, sc.routes)
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
	pub := ctx
	if b.pubWait > 0 {
		var cancel context.CancelFunc
		pub, cancel = context.WithTimeout(ctx, b.pubWait)
		defer cancel()
	}
	err = b.ch.Publish(pub, sc.envs)
	b.stored(ctx, pub, err)
	clear(sc.routes)
	clear(sc.envs) // drop the event pointers
	sc.routes, sc.envs, sc.ends = sc.routes[:0], sc.envs[:0], sc.ends[:0]
	scratchPool.Put(sc)
	return unmatched, err
}

// reply is the delivery.Replier of the broker's triggers: a reply re-enters through the
// same routing path as an ingested event, and counts against the broker's rate
// (replyRate). The dispatcher has already applied the TTL.
func (b *Broker) reply(ctx context.Context, e *event.Event) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("reply %s: %w", e.ID, err)
	}
	if err := b.replyRate(ctx); err != nil {
		return fmt.Errorf("reply %s: %w", e.ID, err)
	}
	e.Set(ExtArrivalTime, b.srv.arrival.now()) // as Knative's ingress stamps a reply
	_, err := b.ingest(ctx, []*event.Event{e})
	return err
}

// defaultTTL is delivery.DefaultTTL as an extension value, formatted once.
var defaultTTL = strconv.Itoa(delivery.DefaultTTL)

// stampTTL sets the loop-guard extension on an event that enters from outside: absent,
// it is delivery.DefaultTTL (255), as Knative's broker sets it; above that it is lowered
// to it, so that a sender cannot buy an event more rounds of replies than Knative gives
// one (a TTL of a thousand would be a thousand deliveries from one request). An event
// whose TTL is spent is refused.
func stampTTL(e *event.Event) error {
	v, ok := e.Get(delivery.ExtTTL)
	if !ok {
		e.Set(delivery.ExtTTL, defaultTTL)
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return &event.ValidationError{Attribute: delivery.ExtTTL, Reason: fmt.Sprintf("%q is not an integer", v)}
	}
	if n <= 0 {
		return &event.ValidationError{Attribute: delivery.ExtTTL, Reason: "TTL exhausted; the event is looping"}
	}
	if n > delivery.DefaultTTL {
		e.Set(delivery.ExtTTL, defaultTTL)
	}
	return nil
}

// triggerList returns the running triggers sorted by key.
func (b *Broker) triggerList() []*trigger {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sortedTriggers()
}

// sortedTriggers is a new slice of b.triggers sorted by key; called with b.mu held.
func (b *Broker) sortedTriggers() []*trigger {
	ts := make([]*trigger, 0, len(b.triggers))
	for _, t := range b.triggers {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].key < ts[j].key })
	return ts
}

// durableGrace bounds how long a durable channel's dispatchers keep delivering on
// shutdown: what they have not delivered by then stays stored and is delivered after a
// restart, so there is no reason to hold the shutdown for the whole backlog.
const durableGrace = 2 * time.Second

// drain delivers what is queued for every trigger until ctx ends (a memory channel) or
// for durableGrace at most (a durable one), stops them, waits for the triggers still
// retiring and closes the channel. No reload may run meanwhile.
//
// It returns how many deliveries were lost: on a memory channel, the events the
// dispatchers held or that were still queued when they stopped, once per trigger; on a
// durable one, none (what is left is logged as kept for redelivery). Either way it adds
// what the retirements still running left.
func (b *Broker) drain(ctx context.Context) int {
	if b.durable {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, durableGrace)
		defer cancel()
	}
	b.stopRedrives() // what they did not hand over stays in the store
	b.stopPauses()   // no pause arrives while the triggers drain
	ts := b.triggerList()
	var held atomic.Int64
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() { held.Add(int64(b.stopTrigger(ctx, t))) }) // pausestate.go
	}
	wg.Wait()
	left := b.retiring.wait()
	b.runs.Wait() // every dispatcher has returned: nothing takes from the queues any more
	if b.durable {
		if n := held.Load(); n > 0 {
			b.log.Info("events kept in the durable channel for delivery after a restart", "broker", b.key, "events", n)
		}
	} else {
		// Nothing adds to the queues either: ingress refuses (shutdown) or no longer
		// routes here (removal), and replies come only from the dispatchers just stopped.
		left += int(held.Load())
		for _, t := range ts {
			left += t.consumer.Len()
		}
	}
	b.stopChecker()
	if err := b.ch.Close(); err != nil {
		b.log.Error("closing channel", "broker", b.key, "err", err)
	}
	return left
}
