package memory

import "sync/atomic"

// Budget bounds the bytes queued across every memory channel that shares it. A budget
// made by Share is also bounded by its parent: a namespace's share of the server's
// budget. It is safe for concurrent use.
type Budget struct {
	limit  int64
	used   atomic.Int64
	parent *Budget // nil for a root budget
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Share returns a budget of at most limit bytes drawn from b: bytes it reserves count
// against both, so channels sharing it cannot hold more than limit, and together with
// b's other users no more than b's limit.
func (b *Budget) Share(limit int64) *Budget { return &Budget{limit: min(limit, b.limit), parent: b} }

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used is how many bytes are reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// fits reports whether n more bytes fit now, here and in every parent.
func (b *Budget) fits(n int64) bool {
	for ; b != nil; b = b.parent {
		if b.used.Load()+n > b.limit {
			return false
		}
	}
	return true
}

// reserve takes n bytes if they fit, here and in every parent.
func (b *Budget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			break
		}
	}
	if b.parent != nil && !b.parent.reserve(n) {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *Budget) release(n int64) {
	for ; b != nil; b = b.parent {
		b.used.Add(-n)
	}
}
