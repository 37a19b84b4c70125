package memory

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// entry is one published event shared by every subscription it was routed to. Its bytes
// return to the budget when the last of them settles it. It holds the node of each
// route: the first inline, so that the usual single route costs no allocation beyond the
// entry, and a handed-out message is one pointer (no allocation to box it either).
type entry struct {
	ev     *event.Event
	size   int64
	refs   atomic.Int32
	budget *Budget
	first  node
	more   []node // the nodes of routes after the first (fan-out)
}

// node is an entry queued on one subscription; handed out, it is that subscription's
// channel.Message.
type node struct {
	e *entry
	q *queue
}

// newEntry returns the entry of ev for n routes.
func newEntry(ev *event.Event, n int, b *Budget) *entry {
	e := &entry{ev: ev, size: int64(ev.Size()), budget: b}
	e.refs.Store(int32(n))
	if n > 1 {
		e.more = make([]node, n-1)
	}
	return e
}

// node returns the entry's i-th node, bound to q.
func (e *entry) node(i int, q *queue) *node {
	nd := &e.first
	if i > 0 {
		nd = &e.more[i-1]
	}
	nd.e, nd.q = e, q
	return nd
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

	settled atomic.Int64 // handed-out entries settled (Ack or Release)

	mu     sync.Mutex
	ring   []*node
	head   int
	count  int
	handed int64 // entries handed out by Receive, ever
}

func newQueue(name string) *queue {
	return &queue{name: name, ready: make(chan struct{}, 1), done: make(chan struct{}), ring: make([]*node, 64)}
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *queue) push(e *node) {
	q.mu.Lock()
	if q.count == len(q.ring) {
		grown := make([]*node, 2*len(q.ring))
		n := copy(grown, q.ring[q.head:])
		copy(grown[n:], q.ring[:q.head])
		q.ring, q.head = grown, 0
	}
	q.ring[(q.head+q.count)%len(q.ring)] = e
	q.count++
	q.mu.Unlock()
	q.signal()
}

// pop takes the oldest node; more reports whether others remain.
func (q *queue) pop() (e *node, more bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.count == 0 {
		return nil, false
	}
	e = q.ring[q.head]
	q.ring[q.head] = nil
	q.head = (q.head + 1) % len(q.ring)
	q.count--
	q.handed++
	return e, q.count > 0
}

// Len is the number of entries stored for the subscription and not settled by it: those
// waiting plus those handed out by Receive and not yet acknowledged or released.
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count + int(q.handed-q.settled.Load())
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
			return e, nil
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
		nd, _ := q.pop()
		if nd == nil {
			return n
		}
		q.settled.Add(1) // pop counted it as handed out
		nd.e.settle()
		n++
	}
}

// Event, Ack and Release make a handed-out node the subscription's channel.Message.
// Settle it once (Ack or Release), as the channel contract says.

// Event returns the stored event.
func (nd *node) Event() *event.Event { return nd.e.ev }

// Ack settles the message.
func (nd *node) Ack() error { nd.q.settled.Add(1); nd.e.settle(); return nil }

// Release frees the message: a memory channel cannot deliver it again.
func (nd *node) Release() bool { nd.q.settled.Add(1); nd.e.settle(); return false }
