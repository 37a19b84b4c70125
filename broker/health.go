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

// storeHealth is whether a broker's channel can store events: the one source of truth
// that /status, /readyz and the dashboard read. Two things write it: ingress, with the
// outcome of every store (a refusal as unavailable marks the channel down, a store
// marks it up), and, for a channel that implements channel.Checker, a check every
// defaultCheckEvery (a failing check marks it down; a passing one after a failing one
// marks it up again, so that a channel that comes back is ready again with no event
// sent).
type storeHealth struct {
	// pub is the last store's refusal as unavailable, nil once a store succeeded (or
	// the checker saw the backend come back).
	pub atomic.Pointer[error]
	// check is the last failing check's error, nil once a check passed.
	check atomic.Pointer[error]

	stop context.CancelFunc // ends the checker; nil without one
	done chan struct{}      // closed when the checker has returned
}

// err returns why the channel cannot store now, or nil.
func (h *storeHealth) err() error {
	if p := h.check.Load(); p != nil {
		return *p
	}
	if p := h.pub.Load(); p != nil {
		return *p
	}
	return nil
}

// stored records the outcome of a store that ctx (the request's) did not end: a
// refusal as unavailable marks the channel down, a success marks it up. The success
// path costs one atomic load.
func (b *Broker) stored(ctx context.Context, err error) {
	switch {
	case err == nil:
		if b.health.pub.Load() != nil {
			b.health.pub.Store(nil)
			b.log.Info("the channel stores events again", "broker", b.key)
		}
	case errors.Is(err, channel.ErrUnavailable) && ctx.Err() == nil:
		if b.health.pub.Swap(&err) == nil {
			// Ingress logs the error itself (storeFailed).
			b.log.Warn("not ready: the channel cannot store events", "broker", b.key)
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
		// The backend is back: a refusal recorded while it was away is past too.
		b.health.pub.Store(nil)
		b.log.Info("the channel's backend is reachable again", "broker", b.key)
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
	for key, b := range *s.brokers.Load() {
		if err := b.health.err(); err != nil {
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
