package overload

import (
	"net/http"
	"sync/atomic"
	"time"
)

// Room is what overload control asks of a broker: the small interface the broker
// implements for its Gate.
type Room interface {
	// Fits reports whether the broker's channel can take n more bytes now (n > 0): a
	// memory channel's byte budget. A channel without one always can.
	Fits(n int64) bool
	// Backlogged reports whether a trigger of the broker has more than limit events
	// stored and not yet settled. It is asked at most every backlogEvery, on the ingress
	// path: it must be cheap and take no lock a request holds.
	Backlogged(limit int) bool
}

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
	at        atomic.Int64 // when over was measured, Unix ns
	over      atomic.Bool
	measuring atomic.Bool
}

// Gate is one broker's admission under overload: its queue of requests waiting for
// room, its backlog verdict, its count of requests storing and its ingress rate. A
// request is refused before its body is read when the broker's channel cannot take it
// (Room.Fits), a trigger is over MaxBacklog, or MaxStoring requests are storing; before
// that refusal it waits up to AdmitWait, in arrival order, for room
// (docs/decisions/0004-admission-queue.md). Safe for concurrent use.
type Gate struct {
	c       *Control
	room    Room
	q       admitQueue
	backlog backlogGate
	rate    atomic.Pointer[Rate] // SetRate; nil: none
}

// Gate returns a new gate of c for the broker room.
func (c *Control) Gate(room Room) *Gate { return &Gate{c: c, room: room} }

// Admission is a request let in by Admit. Done gives back what it counts against the
// broker's room once the request is stored or failed to be; the zero Admission (a
// request not let in) holds nothing.
type Admission struct {
	g *Gate
	n int64 // bytes counted as pending: 0 for a request let in without waiting
}

// Done ends the admission; calling it again does nothing.
func (a *Admission) Done() {
	if a.g != nil {
		a.g.q.stored(a.n)
		a.g = nil
	}
}

// Admit lets in r, a request of n bytes (its Content-Length, 0 when unknown) read at
// now, before its body is read. It comes in on room its connection waited for
// (Reserve); else at once if nobody waits and the broker has room; else it waits for
// room up to AdmitWait, in arrival order, and waited says so. ok false: no room came
// (or AdmitWait is 0, or its connection waited out AdmitWait before the request was
// read): answer 429, then Hold the connection for what is left of RejectHold. The
// caller must call a.Done once the request is stored or failed to be.
func (g *Gate) Admit(r *http.Request, n int64, now time.Time) (a Admission, waited, ok bool) {
	if admitted, late := connTurnOf(r).enter(&g.q, n); admitted {
		return Admission{g: g, n: n}, false, true
	} else if g.q.busy() || !g.admits(n, now) {
		// Full: wait for room before the body is read. A request whose connection
		// waited out AdmitWait before it was read waits no more.
		if late || g.c.opts.AdmitWait <= 0 || !g.q.wait(r.Context(), n, g.c.opts.AdmitWait, func() bool { return g.admits(n, time.Now()) }) {
			return Admission{}, false, false
		}
		return Admission{g: g, n: n}, true, true
	}
	g.q.let() // room found at once: counted as storing only (MaxStoring)
	return Admission{g: g}, false, true
}

// admits reports whether a request of n bytes may be read at now: the cheap checks
// before the body is read. Requests let in from the queue and not yet stored count
// against the channel's byte budget, and every request let in and not yet stored
// against MaxStoring.
func (g *Gate) admits(n int64, now time.Time) bool {
	if n > 0 && !g.room.Fits(n+g.q.pending.Load()) {
		return false
	}
	if lim := g.c.opts.MaxStoring; lim > 0 && g.q.inflight.Load() >= int64(lim) {
		return false
	}
	return !g.overBacklog(now)
}

// overBacklog reports whether a trigger of the broker has more than MaxBacklog stored
// and not yet settled, measuring at most every backlogEvery. False when no bound is set.
func (g *Gate) overBacklog(now time.Time) bool {
	limit := g.c.opts.MaxBacklog
	if limit <= 0 {
		return false
	}
	b := &g.backlog
	if now.UnixNano()-b.at.Load() < int64(backlogEvery) || !b.measuring.CompareAndSwap(false, true) {
		return b.over.Load()
	}
	defer b.measuring.Store(false)
	over := g.room.Backlogged(limit)
	b.over.Store(over)
	b.at.Store(now.UnixNano())
	return over
}

// Reserves reports whether, once r is answered 202, its connection should wait for room
// for its next request before reading it (Reserve): requests are waiting for room, the
// connection has a turn (ConnContext), AdmitWait is above 0 and the server is not
// draining.
func (g *Gate) Reserves(r *http.Request) bool {
	if g.c.opts.AdmitWait <= 0 || !g.q.busy() || g.c.draining.Load() {
		return false
	}
	return connTurnOf(r) != nil
}

// Reserve flushes the answer written to w, then waits up to AdmitWait for room in g
// for the next request of r's connection, assumed the size of r's. Room found is held
// by the connection until that request enters (Admit) or the connection goes idle.
// Call it only when Reserves said so, once r's own Admission is done.
func (g *Gate) Reserve(w http.ResponseWriter, r *http.Request) {
	t := connTurnOf(r)
	if t == nil {
		return
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	n := max(r.ContentLength, 0)
	admitted := g.q.wait(r.Context(), n, g.c.opts.AdmitWait, func() bool { return g.admits(n, time.Now()) })
	if admitted {
		t.q, t.n = &g.q, n
	}
	t.late = !admitted // AdmitWait ran out (or the server is closing)
}

// Waiting is the number of requests waiting for room now
// (sluice_ingress_waiting_requests).
func (g *Gate) Waiting() int64 { return g.q.n.Load() }

// Storing is the number of requests let in and not yet stored now, what MaxStoring
// bounds (sluice_ingress_storing_requests).
func (g *Gate) Storing() int64 { return g.q.inflight.Load() }

// SetRate makes the broker's ingress rate perSec events a second (Rate); 0 removes it.
// A rate that did not change keeps its bucket.
func (g *Gate) SetRate(perSec float64) {
	if old := g.rate.Load(); old != nil && old.perSec == perSec {
		return
	}
	if perSec <= 0 {
		g.rate.Store(nil)
		return
	}
	g.rate.Store(NewRate(perSec))
}

// Rate returns the broker's ingress rate, nil when it has none.
func (g *Gate) Rate() *Rate { return g.rate.Load() }
