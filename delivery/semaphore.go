package delivery

import (
	"context"
	"sync"
	"sync/atomic"
)

// semaphore is a counting semaphore whose limit can change while it is held, with FIFO
// hand-off to waiters. It allocates only when a caller has to wait. Safe for concurrent
// use.
type semaphore struct {
	mu      sync.Mutex
	n       int
	limit   int
	waiters []chan struct{}
}

func newSemaphore(limit int) *semaphore { return &semaphore{limit: max(limit, 1)} }

// acquire takes one unit, waiting until one is free or ctx ends.
func (s *semaphore) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.n < s.limit && len(s.waiters) == 0 {
		s.n++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-ch: // granted while we gave up: hand it on
			s.n--
			s.grantLocked()
		default:
			for i, w := range s.waiters {
				if w == ch {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
		}
		return ctx.Err()
	}
}

// release returns one unit.
func (s *semaphore) release() {
	s.mu.Lock()
	s.n--
	s.grantLocked()
	s.mu.Unlock()
}

// setLimit changes the limit; units already held above a lowered limit stay held until
// released.
func (s *semaphore) setLimit(limit int) {
	s.mu.Lock()
	s.limit = max(limit, 1)
	s.grantLocked()
	s.mu.Unlock()
}

func (s *semaphore) grantLocked() {
	for s.n < s.limit && len(s.waiters) > 0 {
		ch := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		s.n++
		close(ch)
	}
}

// tally counts things held (a dispatcher's jobs) and lets waiters learn when none is:
// add and done are one atomic operation each unless the count reaches zero, and idle
// hands out a channel closed at that moment, so waiting needs no polling. Safe for
// concurrent use.
type tally struct {
	n    atomic.Int64
	mu   sync.Mutex
	zero chan struct{} // closed when n reaches 0; nil until a waiter asks
}

// closedChan is an always-closed channel, for waiters on a tally already at zero.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (t *tally) add() { t.n.Add(1) }

func (t *tally) done() {
	if t.n.Add(-1) != 0 {
		return
	}
	t.mu.Lock()
	if t.n.Load() == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// idle returns a channel that is closed once the count is zero: at once if it is now.
// The count may rise again afterwards; ask again to wait for the next time.
func (t *tally) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n.Load() == 0 {
		return closedChan
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	return t.zero
}
