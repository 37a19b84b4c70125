// Package memory is the fastest channel: events wait in per-subscription queues in
// memory, bounded by a byte budget, and are lost if the process dies. It does the
// Knative In-Memory Channel's job without its unbounded growth: when the budget is spent,
// Publish fails at once with channel.ErrFull and ingress answers 429; a batch larger than
// the whole budget fails with channel.ErrTooLarge (413): it could never be stored.
//
// An event routed to several subscriptions is stored once and counted once against the
// budget; its bytes return when the last subscription settles it.
package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-broker/sluice/channel"
)

// DefaultLimit is the byte budget of a channel created without WithBudget, and the
// default of `sluice serve --memory-limit`: 64 MiB.
const DefaultLimit = 64 << 20

// Channel is a memory channel. It is safe for concurrent use.
type Channel struct {
	budget *Budget

	mu     sync.RWMutex
	queues map[string]*queue
	closed bool
}

var _ channel.Channel = (*Channel)(nil)

// Option configures a Channel.
type Option func(*Channel)

// WithBudget makes the channel draw on b, which other channels may share; by default a
// channel has a budget of its own of DefaultLimit bytes.
func WithBudget(b *Budget) Option { return func(c *Channel) { c.budget = b } }

// New returns an empty memory channel.
func New(opts ...Option) *Channel {
	c := &Channel{queues: make(map[string]*queue)}
	for _, o := range opts {
		o(c)
	}
	if c.budget == nil {
		c.budget = NewBudget(DefaultLimit)
	}
	return c
}

// Admits reports whether n more bytes fit the budget now (channel.Admitter).
func (c *Channel) Admits(n int64) bool { return c.budget.fits(n) }

var _ channel.Admitter = (*Channel)(nil)

// MaxBytes is the most bytes the channel can ever hold at once: its budget's limit (a
// share's is at most its parent's). Ingress refuses a larger request 413 rather than 429.
func (c *Channel) MaxBytes() int64 { return c.budget.Limit() }

// Budget returns the byte budget the channel draws on.
func (c *Channel) Budget() *Budget { return c.budget }

// Publish queues each envelope on the subscriptions it names, all or nothing: if the
// batch does not fit the budget it returns channel.ErrFull and queues none (ErrTooLarge
// when it is larger than the budget's limit). A name with
// no open subscription (never consumed, or removed while the event was routed by the
// index of before the removal) is skipped: the event is not stored for it, and an event
// left with no subscription is neither stored nor charged to the budget.
func (c *Channel) Publish(_ context.Context, envs []channel.Envelope) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return channel.ErrClosed
	}
	// Each route is looked up once: the open queues of every envelope, in order, into a
	// stack array when they fit (the usual case), with nil marking a route not open.
	var buf [16]*queue
	qs := buf[:0]
	var total int64
	for i := range envs {
		live := false
		for _, name := range envs[i].Subscriptions {
			q := c.queues[name]
			qs = append(qs, q)
			live = live || q != nil
		}
		if live {
			total += int64(envs[i].Event.Size())
		}
	}
	if total == 0 {
		return nil
	}
	if total > c.budget.Limit() { // it could never fit: refused for good, not 429
		return channel.Refuse(channel.ErrTooLarge, fmt.Sprintf("%d bytes, more than the channel holds at once (%d bytes, --memory-limit)", total, c.budget.Limit()), nil)
	}
	if !c.budget.reserve(total) {
		return channel.Refuse(channel.ErrFull, fmt.Sprintf("%d bytes queued of %d", c.budget.Used(), c.budget.Limit()), nil)
	}
	for i := range envs {
		routes := qs[:len(envs[i].Subscriptions)]
		qs = qs[len(routes):]
		n := 0
		for _, q := range routes {
			if q != nil {
				n++
			}
		}
		if n == 0 {
			continue
		}
		e := newEntry(envs[i].Event, n, c.budget)
		j := 0
		for _, q := range routes {
			if q != nil {
				q.push(e.node(j, q))
				j++
			}
		}
	}
	return nil
}

// Consume returns the queue of the subscription called name, creating it if new.
func (c *Channel) Consume(_ context.Context, name string) (channel.Consumer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	q := c.queues[name]
	if q == nil {
		q = newQueue(name)
		c.queues[name] = q
	}
	return q, nil
}

// Remove deletes the subscription called name and frees what it still held. Drain its
// consumer first: what is left here is lost, and the count is returned in the error.
func (c *Channel) Remove(_ context.Context, name string) error {
	c.mu.Lock()
	q := c.queues[name]
	delete(c.queues, name)
	c.mu.Unlock()
	if q == nil {
		return nil
	}
	q.Close()
	if n := q.drop(); n > 0 {
		return fmt.Errorf("subscription %s removed with %d events undelivered", name, n)
	}
	return nil
}

// Len returns how many events are stored for the subscription called name and not
// settled by it (Consumer.Len of its consumer).
func (c *Channel) Len(name string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if q := c.queues[name]; q != nil {
		return q.Len()
	}
	return 0
}

// Close closes every consumer; what is still queued is freed.
func (c *Channel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for name, q := range c.queues {
		q.Close()
		q.drop()
		delete(c.queues, name)
	}
	return nil
}
