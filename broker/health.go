package broker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/channel"
)

// defaultCheckEvery is how often a broker asks its channel whether its backend is
// reachable (channel.Checker), and checkTimeout how long one ask may take.
const (
	defaultCheckEvery = 2 * time.Second
	checkTimeout      = 5 * time.Second
)

// refusalTTL is how long one store refused as unavailable keeps its broker not ready
// when nothing else tells otherwise: another refusal renews it, a store that succeeds or
// a passing check of the channel ends it at once. So a channel with no check (Kinesis),
// whose broker a Service stopped sending to, is ready again by itself.
const refusalTTL = 10 * time.Second

// storeHealth is whether a broker's channel can store events: the one source of truth
// that /status, /readyz and the dashboard read. Two things write it: ingress, with the
// outcome of every store (a refusal as unavailable marks the channel down for
// refusalTTL, a store marks it up), and, for a channel that implements channel.Checker,
// a check every defaultCheckEvery (a failing check marks it down until a check passes;
// a passing one clears the refusal mark too, so that a channel that stores again is
// ready again with no event sent).
type storeHealth struct {
	// pub is the last store's refusal as unavailable, nil once a store succeeded or a
	// check passed; past refusalTTL after its time it no longer counts.
	pub atomic.Pointer[refusal]
	// check is the last failing check's error, nil once a check passed.
	check atomic.Pointer[error]
	// checked is true when the channel implements channel.Checker.
	checked bool

	stop context.CancelFunc // ends the checker; nil without one
	done chan struct{}      // closed when the checker has returned
}

// refusal is a store refused as unavailable, and when.
type refusal struct {
	err error
	at  time.Time
}

// live reports whether r still marks the channel down at now.
func (r *refusal) live(now time.Time) bool { return r != nil && now.Sub(r.at) < refusalTTL }

// err returns why the channel cannot store at now, or nil.
func (h *storeHealth) err(now time.Time) error {
	if p := h.check.Load(); p != nil {
		return *p
	}
	if r := h.pub.Load(); r.live(now) {
		return r.err
	}
	return nil
}

// stored records the outcome of a store: err is what the channel's Publish returned
// under pub, a child of the request's context req with the publish timeout. A refusal
// as unavailable marks the channel down, unless req ended (the client left) or, while
// the channel's check passes, the publish timeout ended it (an overloaded backend that
// answers its checks is slow, not down). A success marks it up. The success path costs
// one atomic load.
func (b *Broker) stored(req, pub context.Context, err error) {
	switch {
	case err == nil:
		if p := b.health.pub.Load(); p != nil {
			b.health.pub.Store(nil)
			if p.live(b.srv.opts.now()) {
				b.log.Info("the channel stores events again", "broker", b.key)
			}
		}
	case !errors.Is(err, channel.ErrUnavailable) || req.Err() != nil:
	case pub.Err() != nil && b.health.checked && b.health.check.Load() == nil:
		// The publish timeout under overload: ingress answers 503, the broker stays ready.
	default:
		now := b.srv.opts.now()
		if old := b.health.pub.Swap(&refusal{err: err, at: now}); !old.live(now) {
			// Ingress logs the error itself (storeFailed).
			b.log.Warn("not ready: the channel cannot store events", "broker", b.key, "up_to", refusalTTL)
		}
	}
}

// startChecker starts the broker's check of its channel, if the channel implements
// channel.Checker. The first check runs at once. drain stops it.
func (b *Broker) startChecker(life context.Context) {
	c, ok := b.ch.(channel.Checker)
	if !ok {
		return
	}
	b.health.checked = true
	if b.srv.opts.checkEvery <= 0 {
		return // checks run by hand (withCheckEvery(0), tests only)
	}
	ctx, stop := context.WithCancel(life)
	b.health.stop, b.health.done = stop, make(chan struct{})
	go func() {
		defer close(b.health.done)
		tick := time.NewTicker(b.srv.opts.checkEvery)
		defer tick.Stop()
		for {
			b.checkOnce(ctx, c)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// checkOnce asks c once and records the answer.
func (b *Broker) checkOnce(ctx context.Context, c channel.Checker) {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	err := c.Check(cctx)
	cancel()
	if ctx.Err() != nil {
		return // stopping: the answer means nothing
	}
	if err != nil {
		if b.health.check.Swap(&err) == nil {
			b.log.Warn("the channel's backend is unreachable; not ready", "broker", b.key, "err", err)
		}
		return
	}
	if b.health.check.Swap(nil) != nil {
		b.log.Info("the channel's backend is reachable again", "broker", b.key)
	}
	// Every passing check ends a refusal mark: the next store tells again.
	if b.health.pub.Swap(nil).live(b.srv.opts.now()) {
		b.log.Info("the channel's check passes: ready again", "broker", b.key)
	}
}

// stopChecker stops the check and waits for it.
func (b *Broker) stopChecker() {
	if b.health.stop != nil {
		b.health.stop()
		<-b.health.done
	}
}

// notStoring returns, for every running broker whose channel cannot store now, why,
// by broker key.
func (s *Server) notStoring() map[string]error {
	var out map[string]error
	now := s.opts.now()
	for key, b := range *s.brokers.Load() {
		if err := b.health.err(now); err != nil {
			if out == nil {
				out = map[string]error{}
			}
			out[key] = err
		}
	}
	return out
}

// NotReady returns, for every running broker whose channel cannot store events now,
// the reason a sender is told (channel.Reason), by broker key "namespace/name": what the
// dashboard shows.
func (s *Server) NotReady() map[string]string {
	out := map[string]string{}
	for key, err := range s.notStoring() {
		out[key] = "cannot store events: " + channel.Reason(err)
	}
	return out
}

// firstNotStoring returns the key of the first broker, by key, whose channel cannot
// store now and the reason /readyz gives, or "".
func (s *Server) firstNotStoring() (key, reason string) {
	nr := s.NotReady()
	if len(nr) == 0 {
		return "", ""
	}
	keys := slices.Sorted(maps.Keys(nr))
	return keys[0], nr[keys[0]]
}
