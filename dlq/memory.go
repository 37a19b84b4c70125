package dlq

import (
	"context"
	"fmt"
	"sort"
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

	mu       sync.Mutex
	next     uint64
	bytes    int64 // of all triggers
	triggers map[string]*memList
}

// MemoryOption is an option of NewMemory.
type MemoryOption func(*Memory)

// WithTotalBytes bounds the bytes (Entry.Size) a Memory store keeps, all triggers
// together, to n (sluice serve --dlq-memory-limit); at least 1. Default
// DefaultMemoryTotal.
func WithTotalBytes(n int64) MemoryOption { return func(m *Memory) { m.total = n } }

// memList is one trigger's entries, oldest first.
type memList struct {
	entries []Entry
	bytes   int64
	expired int // evicted outside Put (by age in List, or for another trigger's room), reported by the next Put
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty memory store bounded by lim (see Limits.Validate).
func NewMemory(lim Limits, opts ...MemoryOption) (*Memory, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	m := &Memory{lim: lim, total: DefaultMemoryTotal, now: time.Now, triggers: make(map[string]*memList)}
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
	l := m.triggers[trigger]
	if l == nil {
		l = &memList{}
		m.triggers[trigger] = l
	}
	size := e.Size()
	if size > m.lim.MaxBytes {
		return 0, fmt.Errorf("dlq: a dead letter of %d bytes is larger than --dlq-max-bytes %d", size, m.lim.MaxBytes)
	}
	if size > m.total {
		return 0, fmt.Errorf("dlq: a dead letter of %d bytes is larger than --dlq-memory-limit %d", size, m.total)
	}
	m.next++
	e.ID, e.Time = m.next, m.now()
	n := m.expireLocked(l) + l.expired
	l.expired = 0
	for len(l.entries) > 0 && (len(l.entries)+1 > m.lim.MaxEntries || l.bytes+size > m.lim.MaxBytes) {
		m.dropLocked(l, 0)
		n++
	}
	for m.bytes+size > m.total {
		o := m.oldestLocked()
		if o == nil {
			break
		}
		m.dropLocked(o, 0)
		if o == l {
			n++
		} else {
			o.expired++
		}
	}
	l.entries = append(l.entries, e)
	l.bytes += size
	m.bytes += size
	return n, nil
}

// oldestLocked returns the list whose first entry is the oldest of the store (IDs grow
// with time across triggers), or nil when the store is empty.
func (m *Memory) oldestLocked() *memList {
	var o *memList
	for _, l := range m.triggers {
		if len(l.entries) > 0 && (o == nil || l.entries[0].ID < o.entries[0].ID) {
			o = l
		}
	}
	return o
}

// expireLocked evicts l's entries older than MaxAge and returns how many.
func (m *Memory) expireLocked(l *memList) int {
	cut := m.now().Add(-m.lim.MaxAge)
	n := 0
	for len(l.entries) > 0 && l.entries[0].Time.Before(cut) {
		m.dropLocked(l, 0)
		n++
	}
	return n
}

// dropLocked removes l's entry at index i.
func (m *Memory) dropLocked(l *memList, i int) {
	size := l.entries[i].Size()
	l.bytes -= size
	m.bytes -= size
	l.entries[i] = Entry{}
	if i == 0 {
		l.entries = l.entries[1:]
		return
	}
	l.entries = append(l.entries[:i], l.entries[i+1:]...)
}

// List returns a page of trigger's entries; see Store. Entries past MaxAge are not
// listed.
func (m *Memory) List(_ context.Context, trigger string, after uint64, limit int) (Page, error) {
	limit = ClampPage(limit)
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.triggers[trigger]
	if l == nil {
		return Page{}, nil
	}
	l.expired += m.expireLocked(l)
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].ID > after })
	end := min(i+limit, len(l.entries))
	p := Page{Entries: append([]Entry(nil), l.entries[i:end]...), Total: len(l.entries), Bytes: l.bytes}
	if end < len(l.entries) {
		p.Next = l.entries[end-1].ID
	}
	if n := len(l.entries); n > 0 {
		p.Last = l.entries[n-1].ID
	}
	return p, nil
}

// Delete removes entry id of trigger; see Store.
func (m *Memory) Delete(_ context.Context, trigger string, id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.triggers[trigger]
	if l == nil {
		return ErrNotFound
	}
	i := sort.Search(len(l.entries), func(i int) bool { return l.entries[i].ID >= id })
	if i == len(l.entries) || l.entries[i].ID != id {
		return ErrNotFound
	}
	m.dropLocked(l, i)
	if len(l.entries) == 0 && l.expired == 0 {
		delete(m.triggers, trigger)
	}
	return nil
}

// Len returns how many entries the store holds, all triggers together.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.triggers {
		n += len(l.entries)
	}
	return n
}

// Purge removes every entry of trigger; see Store.
func (m *Memory) Purge(_ context.Context, trigger string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.triggers[trigger]
	if l == nil {
		return 0, nil
	}
	delete(m.triggers, trigger)
	m.bytes -= l.bytes
	return len(l.entries), nil
}
