package overload

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Waiting for room (docs/decisions/0004-admission-queue.md). A request that finds its
// broker full waits, in arrival order and before its body is read, for up to AdmitWait
// for the broker to drain enough to take it, and is refused 429 only if it does not. Its body stays in the
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
// waiter, not all of them. inflight counts every request let in and not yet stored,
// for Options.MaxStoring.
type admitQueue struct {
	mu          sync.Mutex
	front, back *admitWaiter // oldest first, linked through next
	n           atomic.Int64
	pending     atomic.Int64
	inflight    atomic.Int64 // requests let in (waiting or not) and not yet stored: Options.MaxStoring
}

// admitWaiter is a request in the queue. Waiters are pooled (admitWaiters) with their
// channel and ticker: under overload every request waits, and a new waiter, channel,
// list element and ticker each time were a fifth of the objects the broker allocated
// per event.
type admitWaiter struct {
	n          int64         // the request's Content-Length
	turn       chan struct{} // receives when this waiter becomes the oldest
	poll       *time.Ticker  // the oldest waiter's, every admitPoll; stopped when not in use
	polling    bool          // poll runs
	prev, next *admitWaiter
}

var admitWaiters = sync.Pool{New: func() any {
	t := time.NewTicker(time.Hour)
	t.Stop()
	return &admitWaiter{turn: make(chan struct{}, 1), poll: t}
}}

// busy reports whether requests are waiting.
func (q *admitQueue) busy() bool { return q.n.Load() > 0 }

// wait queues a request of n bytes (0 when unknown) and returns true once admit holds
// for it, after which the caller must call q.stored(n) when it has stored the request
// or failed to; it returns false if that did not happen within d or before ctx ended.
//
// Only the oldest waiter polls; the others are parked on their turn. Deadlines grow
// from the front of the queue to the back, so a waiter whose time is up is the oldest
// or becomes it once those before it are let in or run out of time, and checks its
// deadline as soon as it has the turn: none waits much longer than d.
func (q *admitQueue) wait(ctx context.Context, n int64, d time.Duration, admit func() bool) bool {
	deadline := time.Now().Add(d)
	w := admitWaiters.Get().(*admitWaiter)
	w.n = n
	defer q.recycle(w)
	q.mu.Lock()
	q.pushBack(w)
	q.n.Add(1)
	if q.front == w {
		w.turn <- struct{}{}
	}
	q.mu.Unlock()
	select {
	case <-w.turn:
	case <-ctx.Done():
		q.leave(w, false)
		return false
	}
	for {
		if admit() {
			q.leave(w, true)
			return true
		}
		if !time.Now().Before(deadline) {
			q.leave(w, false)
			return false
		}
		if !w.polling {
			w.poll.Reset(admitPoll)
			w.polling = true
		}
		select {
		case <-w.poll.C:
		case <-ctx.Done():
			q.leave(w, false)
			return false
		}
	}
}

// recycle returns w, out of the queue, to the pool: its ticker stopped (a stopped
// ticker's channel delivers nothing stale since Go 1.23) and its turn channel empty (a
// turn may have been handed to it as it left).
func (q *admitQueue) recycle(w *admitWaiter) {
	if w.polling {
		w.poll.Stop()
		w.polling = false
	}
	select {
	case <-w.turn:
	default:
	}
	w.n, w.prev, w.next = 0, nil, nil
	admitWaiters.Put(w)
}

// pushBack appends w to the queue; called with q.mu held.
func (q *admitQueue) pushBack(w *admitWaiter) {
	w.prev, w.next = q.back, nil
	if q.back != nil {
		q.back.next = w
	} else {
		q.front = w
	}
	q.back = w
}

// remove unlinks w from the queue; called with q.mu held.
func (q *admitQueue) remove(w *admitWaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.front = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.back = w.prev
	}
	w.prev, w.next = nil, nil
}

// leave takes w out of the queue (counting its bytes as pending when it was let in) and
// hands the turn to the next waiter if w had it.
func (q *admitQueue) leave(w *admitWaiter, admitted bool) {
	q.mu.Lock()
	first := q.front == w
	q.remove(w)
	q.n.Add(-1)
	if admitted {
		q.pending.Add(w.n)
		q.inflight.Add(1)
	}
	if next := q.front; first && next != nil {
		select {
		case next.turn <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
}

// let counts a request let in without waiting as storing (Options.MaxStoring), until
// q.stored(0). Its bytes are not counted: it found room.
func (q *admitQueue) let() { q.inflight.Add(1) }

// stored ends the counts of a request let in, n its bytes counted as pending (0 for one
// let in without waiting).
func (q *admitQueue) stored(n int64) {
	q.pending.Add(-n)
	q.inflight.Add(-1)
}
