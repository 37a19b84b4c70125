package broker

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Waiting for room (docs/overload.md). A request that finds its broker full waits, in
// arrival order and before its body is read, for up to AdmitWait for the broker to drain
// enough to take it, and is refused 429 only if it does not. Its body stays in the
// socket meanwhile, so the client is pushed back through TCP, and the CPU a refusal
// costs (reading, parsing and answering a request the client will send again) goes to
// delivery instead: under overload most requests are answered 202 a little later
// instead of 429 at once. Only the oldest waiter polls the broker (every admitPoll); the
// others are parked and cost nothing until their turn. While anyone waits, new requests
// join the back of the queue rather than take the room the waiters are waiting for.

// admitPoll is how often the oldest waiter asks whether the broker has room.
const admitPoll = time.Millisecond

// admitQueue is one broker's queue of requests waiting for room. pending counts the
// bytes of requests let in from the queue that have not finished storing: they are
// counted against the memory channel's budget, so that one freed slot lets in one
// waiter, not all of them.
type admitQueue struct {
	mu      sync.Mutex
	waiting list.List // of *admitWaiter, oldest first
	n       atomic.Int64
	pending atomic.Int64
}

type admitWaiter struct {
	n    int64         // the request's Content-Length
	turn chan struct{} // receives when this waiter becomes the oldest
	el   *list.Element
}

// busy reports whether requests are waiting.
func (q *admitQueue) busy() bool { return q.n.Load() > 0 }

// wait queues a request of n bytes (0 when unknown) and returns true once admit holds
// for it, after which the caller must call q.stored(n) when it has stored the request
// or failed to; it returns false if that did not happen within d or before ctx ended.
//
// Only the oldest waiter has a ticker; the others are parked on their turn. Deadlines
// grow from the front of the queue to the back, so a waiter whose time is up is the
// oldest or becomes it once those before it are let in or run out of time, and checks
// its deadline as soon as it has the turn: none waits much longer than d.
func (q *admitQueue) wait(ctx context.Context, n int64, d time.Duration, admit func() bool) bool {
	deadline := time.Now().Add(d)
	w := &admitWaiter{n: n, turn: make(chan struct{}, 1)}
	q.mu.Lock()
	w.el = q.waiting.PushBack(w)
	q.n.Add(1)
	if q.waiting.Front() == w.el {
		w.turn <- struct{}{}
	}
	q.mu.Unlock()
	select {
	case <-w.turn:
	case <-ctx.Done():
		q.leave(w, false)
		return false
	}
	var poll *time.Ticker
	for {
		if admit() {
			q.leave(w, true)
			return true
		}
		if !time.Now().Before(deadline) {
			q.leave(w, false)
			return false
		}
		if poll == nil {
			poll = time.NewTicker(admitPoll)
			defer poll.Stop()
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			q.leave(w, false)
			return false
		}
	}
}

// leave takes w out of the queue (counting its bytes as pending when it was let in) and
// hands the turn to the next waiter if w had it.
func (q *admitQueue) leave(w *admitWaiter, admitted bool) {
	q.mu.Lock()
	first := q.waiting.Front() == w.el
	q.waiting.Remove(w.el)
	q.n.Add(-1)
	if admitted {
		q.pending.Add(w.n)
	}
	if next := q.waiting.Front(); first && next != nil {
		select {
		case next.Value.(*admitWaiter).turn <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
}

// stored ends the pending count of a request wait let in.
func (q *admitQueue) stored(n int64) { q.pending.Add(-n) }
