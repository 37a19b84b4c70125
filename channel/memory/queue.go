package memory

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// entry is one published event shared by every subscription it was routed to. Its bytes
// return to the budget when the last of them settles it.
type entry struct {
	ev     *event.Event
	size   int64
	refs   atomic.Int32
	budget *Budget
}

func (e *entry) settle() {
	if e.refs.Add(-1) == 0 {
		e.budget.release(e.size)
	}
}

// queue is one subscription's FIFO of entries: a growable ring under a mutex, with a
// one-slot signal channel that wakes one waiting receiver per push (a receiver that
// leaves items behind passes the signal on).
type queue struct {
	name  string
	ready chan struct{}
	done  chan struct{} // closed by Close or the channel's Close
	once  sync.Once

	out atomic.Int64 // entries handed out by Receive and not yet settled

	mu    sync.Mutex
	ring  []*entry
	head  int
	count int
}

func newQueue(name string) *queue {
	return &queue{name: name, ready: make(chan struct{}, 1), done: make(chan struct{}), ring: make([]*entry, 64)}
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) push(e *entry) {
	q.mu.Lock()
	if q.count == len(q.ring) {
		grown := make([]*entry, 2*len(q.ring))
		n := copy(grown, q.ring[q.head:])
		copy(grown[n:], q.ring[:q.head])
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.count)%len(q.ring)] = e
	q.count++
	q.mu.Unlock()
	q.signal()
}

// pop takes the oldest entry; more reports whether others remain.
func (q *queue) pop() (e *entry, more bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count == 0 {
		return nil, false
	}
	e = q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.count--
	return e, q.count > 0
}

// Len is the number of entries stored for the subscription and not settled by it: those
// waiting plus those handed out by Receive and not yet acknowledged or released.
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count + int(q.out.Load())
}

// Receive implements channel.Consumer.
func (q *queue) Receive(ctx context.Context) (channel.Message, error) {
	for {
		select {
		case <-q.done:
			return nil, channel.ErrClosed
		default:
		}
		if e, more := q.pop(); e != nil {
			if more {
				q.signal()
			}
			q.out.Add(1)
			return message{e: e, q: q}, nil
		}
		select {
		case <-q.ready:
		case <-q.done:
			return nil, channel.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close implements channel.Consumer: Receive returns ErrClosed afterwards; entries stay
// queued until the subscription is removed.
func (q *queue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

// drop settles every entry left, returning how many there were.
func (q *queue) drop() int {
	n := 0
	for {
		e, _ := q.pop()
		if e == nil {
			return n
		}
		e.settle()
		n++
	}
}

// message is one entry handed to one subscription. Settle it once (Ack or Release), as
// the channel contract says.
type message struct {
	e *entry
	q *queue
}

func (m message) Event() *event.Event { return m.e.ev }
func (m message) Ack() error          { m.q.out.Add(-1); m.e.settle(); return nil }

// Release frees the entry: a memory channel cannot deliver it again.
func (m message) Release() bool { m.q.out.Add(-1); m.e.settle(); return false }
