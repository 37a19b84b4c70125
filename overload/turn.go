package overload

import (
	"context"
	"net/http"
)

// Waiting for room before a connection's next request is read
// (docs/decisions/0006-connection-turn.md). Under overload every request waits in the
// admission queue (queue.go); a request read before its turn has cost a wake-up of its
// connection's goroutine by the network, a read and a parse, only to park again in the
// queue, and with 2,048 connections those wake-ups are most of what the one core's run
// queue holds. So after a 202 while requests wait, a connection whose server keeps a
// connTurn for it (ConnContext: the lean HTTP/1.1 path) flushes the 202 and then waits
// in the queue for room for its next request, before reading it: the client's next
// request waits in the socket (pushed back through TCP, as after a 429) and is read
// once it can be let in.
//
// The room taken is held by the connection (connTurn) only while it is being served: the
// server calls idle when the connection is about to wait for a request it has not got,
// or is let go, and the room is given back; so an idle client holds none.

// connTurn is a connection's room in a broker's admission queue, taken for its next
// request. Used by the connection's goroutine only.
type connTurn struct {
	q    *admitQueue // the queue (of a broker's Gate) whose room is held; nil: none
	n    int64       // bytes counted as pending for it
	late bool        // the last wait for room ran out, the next request read since: it waits no more
}

type connTurnKey struct{}

// ConnContext gives a connection its turn, for a server that hands each connection a
// context (internal/httpserver's WithConnContext): the context its requests carry, and
// the function that gives back room it holds when the connection goes idle or away.
func (c *Control) ConnContext(ctx context.Context) (context.Context, func()) {
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
	if t.q != nil {
		t.q.stored(t.n)
		t.q = nil
	}
}

// enter reports, for a request of n bytes to the broker of q, whether it comes in on
// room its connection holds in q (then the room is the request's, its bytes counted as
// pending until its Admission is done), and whether its connection waited out AdmitWait
// for it before reading it (then it waits no more). Room held in another queue is given
// back. Both false on a connection without a turn (t nil).
func (t *connTurn) enter(q *admitQueue, n int64) (admitted, late bool) {
	if t == nil {
		return false, false
	}
	late, t.late = t.late, false
	if t.q != q {
		t.idle()
		return false, late
	}
	q.pending.Add(n - t.n)
	t.q = nil
	return true, late
}
