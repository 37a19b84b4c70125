package memory

import "sync/atomic"

// Budget bounds the bytes queued across every memory channel that shares it. It is safe
// for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used is how many bytes are reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// reserve takes n bytes if they fit.
func (b *Budget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *Budget) release(n int64) { b.used.Add(-n) }
