package broker

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/channel"
)

// Ingress admission under overload (docs/overload.md). Two rules keep delivery's share
// of the CPU when events arrive faster than the triggers deliver them:
//
//  1. A request is refused before its body is read when the broker's channel cannot
//     take it: a memory channel's budget is full (channel.Admitter), or one of the
//     broker's triggers has more than the backlog bound stored and unsettled
//     (WithMaxBacklog; any channel, durable ones included), or it already stores as many
//     requests at once as WithMaxStoring allows.
//     Before that refusal the request waits up to AdmitWait, in arrival order, for room
//     (admitqueue.go): most requests under overload are admitted a little later instead
//     of refused.
//  2. After a 429 the connection is held: the complete answer is flushed at once, then
//     the handler waits RejectHold (jittered between ½ and 1×; twice that while more
//     than 2 × holdScale connections are held) before net/http reads the connection's next
//     request. That next request waits in the socket, so a client
//     that keeps sending is pushed back through TCP at no CPU cost, instead of the broker
//     spending its core reading, parsing and refusing requests as fast as they come.
//     Each HTTP/1.1 connection then costs at most one refusal per hold.

// holdScale is the number of held connections per unit of RejectHold: with more held,
// each is held longer (at most 2×, so that the next request on a held connection is
// still answered well within a second).
const holdScale = 512

// backlogEvery bounds how often the backlog of a broker's triggers is measured; between
// measurements ingress uses the last verdict. Consumer.Len is cheap (channel.Consumer:
// a durable backend asks its server at most every 100 ms and moves the answer by what
// this process stored and settled in between), and the verdict must follow the backlog
// closely: with 20 ms, under overload it opened for 20 ms (every waiting request let in
// at once) and shut for the next, and the bursts cost delivery rate
// (docs/decisions/0007-backlog-bound.md).
const backlogEvery = time.Millisecond

// backlogGate caches whether a broker's triggers are over the backlog bound. Requests
// read the cached verdict without a lock; the one that finds it stale measures while the
// others keep using the old verdict.
type backlogGate struct {
	limit     int          // set before the broker serves; 0: no bound
	at        atomic.Int64 // when over was measured, Unix ns
	over      atomic.Bool
	measuring atomic.Bool
}

// overBacklog reports whether a trigger of b has more than the backlog bound stored and
// not yet settled, measuring at most every backlogEvery. False when no bound is set.
func (b *Broker) overBacklog(now time.Time) bool {
	g := &b.backlog
	if g.limit <= 0 {
		return false
	}
	if now.UnixNano()-g.at.Load() < int64(backlogEvery) || !g.measuring.CompareAndSwap(false, true) {
		return g.over.Load()
	}
	defer g.measuring.Store(false)
	over := false
	var live []*trigger
	if l := b.live.Load(); l != nil {
		live = *l
	}
	for _, t := range live {
		if t.consumer.Len() > g.limit {
			over = true
			break
		}
	}
	g.over.Store(over)
	g.at.Store(now.UnixNano())
	return over
}

// admits reports whether ingress should read a request of n bytes (n < 0: unknown) for
// b at now (a time.Now reading): the cheap checks before the body is read. Requests let
// in from the admission queue and not yet stored count against the memory channel's
// budget, and every request let in and not yet stored against WithMaxStoring
// (admitqueue.go).
func (s *Server) admits(b *Broker, n int64, now time.Time) bool {
	if a, ok := b.ch.(channel.Admitter); ok && n > 0 && !a.Admits(n+b.admitq.pending.Load()) {
		return false
	}
	if lim := s.opts.maxStoring; lim > 0 && b.admitq.inflight.Load() >= int64(lim) {
		return false
	}
	return !b.overBacklog(now)
}

// rejectFull answers 429 with Retry-After, flushes it whole, and holds the connection
// (rule 2 above), less what the request waited already, before returning.
func (s *Server) rejectFull(w http.ResponseWriter, r *http.Request, b *Broker, reason string, waited time.Duration) {
	b.m.full.Inc()
	body := "channel full: try again after Retry-After: " + reason + "\n"
	h := w.Header()
	h.Set("Retry-After", retryAfterFull)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(body))
	s.holdConn(w, r, waited)
}

// holdConn flushes the answer written to w and waits RejectHold less waited, jittered
// between ½ and 1×, before returning, so that net/http does not read the connection's next request
// meanwhile. Only HTTP/1.x connections are held (an HTTP/2 stream holds nothing but
// itself); the wait ends early if the client goes away or the server shuts down.
func (s *Server) holdConn(w http.ResponseWriter, r *http.Request, waited time.Duration) {
	d := s.opts.rejectHold - waited
	if d <= 0 || r.ProtoMajor != 1 || s.draining.Load() {
		return
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	// Many connections held at once mean many clients refused: hold each longer, so
	// refusals cost no more CPU with 2,048 connections than with a few hundred.
	n := s.held.Add(1)
	defer s.held.Add(-1)
	d = d * time.Duration(min(max(n/holdScale, 1), 2))
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-s.life.Done():
	}
}
