package broker

import (
	"context"
	"net/http"
	"time"
)

// Waiting for room before a connection's next request is read (docs/overload.md, part
// 6). Under overload every request waits in the admission queue (admitqueue.go); a
// request read before its turn has cost a wake-up of its connection's goroutine by the
// network, a read and a parse, only to park again in the queue, and with 2,048
// connections those wake-ups are most of what the one core's run queue holds. So after
// a 202 while requests wait, a connection served by the lean path (which keeps a
// connTurn for it, ConnContext) flushes the 202 and then waits in the queue for room for
// its next request, before reading it: the client's next request waits in the socket
// (pushed back through TCP, as after a 429) and is read once it can be let in.
//
// The room taken is held by the connection (connTurn) only while it is being served: the
// lean path calls idle when the connection is about to wait for a request it has not
// got, or is let go, and the room is given back; so an idle client holds none.

// connTurn is a lean connection's room in a broker's admission queue, taken for its next
// request. Used by the connection's goroutine only.
type connTurn struct {
	b    *Broker // the broker whose room is held; nil: none
	n    int64   // bytes counted as pending for it
	late bool    // the last wait for room ran out, the next request read since: it waits no more
}

type connTurnKey struct{}

// ConnContext gives a connection its connTurn, for httpserver.WithConnContext: the
// context its requests carry, and the function that gives back room it holds when the
// connection goes idle or away.
func (s *Server) ConnContext(ctx context.Context) (context.Context, func()) {
	t := &connTurn{}
	return context.WithValue(ctx, connTurnKey{}, t), t.idle
}

func connTurnOf(r *http.Request) *connTurn {
	t, _ := r.Context().Value(connTurnKey{}).(*connTurn)
	return t
}

// idle gives back the room held, if any. The connection's next request was not waiting
// in the socket meanwhile, so it is not late either.
func (t *connTurn) idle() {
	t.late = false
	if t.b != nil {
		t.b.admitq.stored(t.n)
		t.b = nil
	}
}

// enter reports, for a request of n bytes to b, whether it comes in on room its
// connection holds for b (then the room is the request's, its bytes counted as pending
// until the caller's q.stored(n)), and whether its connection waited out AdmitWait for
// it before reading it (then it waits no more). Room held for another broker is given
// back. Both false on a connection without a turn (t nil: not the lean path's).
func (t *connTurn) enter(b *Broker, n int64) (admitted, late bool) {
	if t == nil {
		return false, false
	}
	late, t.late = t.late, false
	if t.b != b {
		t.idle()
		return false, late
	}
	b.admitq.pending.Add(n - t.n)
	t.b = nil
	return true, late
}

// reserves returns the turn of r's connection when, after the 202 to r for b, it should
// wait for room for its next request (reserve): requests are waiting and the connection
// is the lean path's; nil otherwise.
func (s *Server) reserves(r *http.Request, b *Broker) *connTurn {
	if s.opts.admitWait <= 0 || !b.admitq.busy() || s.draining.Load() {
		return nil
	}
	return connTurnOf(r)
}

// reserve waits, after the 202 to r was flushed, up to AdmitWait for room in b for the
// connection's next request, assumed the size of r's. Room found is held in t.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request, b *Broker, t *connTurn) {
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	n := max(r.ContentLength, 0)
	admitted := b.admitq.wait(r.Context(), n, s.opts.admitWait, func() bool { return s.admits(b, n, time.Now()) })
	if admitted {
		t.b, t.n = b, n
	}
	t.late = !admitted // AdmitWait ran out (or the server is closing)
}
