package dlq

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMemoryTotal is the default bound of a Memory store's bytes, all triggers
// together (WithTotalBytes): a quarter of sluice serve's default --memory-limit.
const DefaultMemoryTotal = 16 << 20

// Memory is a Store in the process's memory: what it holds is lost with the process.
// It is bounded by the Limits per trigger and by a total of bytes for all triggers
// together (WithTotalBytes): past that, the oldest entry of any trigger is evicted first.
type Memory struct {
	lim   Limits
	total int64 // bytes of all triggers together
	now   func() time.Time

	mu   sync.Mutex
	next uint64
	ix   *Index[struct{}]
}

// MemoryOption is an option of NewMemory.
type MemoryOption func(*Memory)

// WithTotalBytes bounds the bytes (Entry.Size) a Memory store keeps, all triggers
// together, to n (sluice serve --dlq-memory-limit); at least 1. Default
// DefaultMemoryTotal.
func WithTotalBytes(n int64) MemoryOption { return func(m *Memory) { m.total = n } }

var _ Store = (*Memory)(nil)

// NewMemory returns an empty memory store bounded by lim (see Limits.Validate).
func NewMemory(lim Limits, opts ...MemoryOption) (*Memory, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	m := &Memory{lim: lim, total: DefaultMemoryTotal, now: time.Now, ix: NewIndex[struct{}](lim)}
	for _, o := range opts {
		o(m)
	}
	if m.total < 1 {
		return nil, fmt.Errorf("--dlq-memory-limit %d: want at least 1", m.total)
	}
	return m, nil
}

// Durable reports false.
func (m *Memory) Durable() bool { return false }

// Put stores e for trigger; see Store.
func (m *Memory) Put(_ context.Context, trigger string, e Entry) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	size := e.Size()
	if size > m.lim.MaxBytes {
		return 0, fmt.Errorf("dlq: a dead letter of %d bytes is larger than --dlq-max-bytes %d", size, m.lim.MaxBytes)
	}
	if size > m.total {
		return 0, fmt.Errorf("dlq: a dead letter of %d bytes is larger than --dlq-memory-limit %d", size, m.total)
	}
	m.next++
	e.ID, e.Time = m.next, m.now()
	n := len(m.ix.Add(trigger, e, struct{}{})) + m.ix.TakeExpired(trigger)
	// e has the highest ID of all: it is evicted for the total only if it is alone, and
	// then it fits.
	n += m.ix.EvictOldestWhile(trigger, func(Item[struct{}]) bool { return m.ix.Bytes() > m.total })
	return n, nil
}

// List returns a page of trigger's entries; see Store. Entries past MaxAge are not
// listed.
func (m *Memory) List(_ context.Context, trigger string, after uint64, limit int) (Page, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ix.Expire(trigger, m.now())
	return m.ix.Page(trigger, after, limit), nil
}

// Delete removes entry id of trigger; see Store.
func (m *Memory) Delete(_ context.Context, trigger string, id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.ix.Delete(trigger, id); !ok {
		return ErrNotFound
	}
	return nil
}

// Len returns how many entries the store holds, all triggers together.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ix.Len()
}

// Purge removes every entry of trigger; see Store.
func (m *Memory) Purge(_ context.Context, trigger string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.ix.Purge(trigger)
	m.ix.TakeExpired(trigger) // a purge forgets the trigger's evictions not reported yet
	return n, nil
}
