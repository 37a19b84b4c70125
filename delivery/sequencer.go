package delivery

import "sync"

// sequencer serialises the jobs of an ordered target per partition key: at most one job
// per key is active (in flight or waiting for a retry); the others queue behind it in
// arrival order. Its memory is bounded by the dispatcher's pending bound, since every
// queued job holds a pending slot. Safe for concurrent use.
type sequencer struct {
	mu   sync.Mutex
	keys map[string]*keyQueue
	free []*keyQueue
}

type keyQueue struct{ q []*job }

// admit registers j; it reports whether j may start now (no earlier job of its key is
// active). Otherwise j is queued and handed back by done.
func (s *sequencer) admit(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = make(map[string]*keyQueue)
	}
	if kq, ok := s.keys[j.key]; ok {
		kq.q = append(kq.q, j)
		return false
	}
	var kq *keyQueue
	if n := len(s.free); n > 0 {
		kq, s.free = s.free[n-1], s.free[:n-1]
	} else {
		kq = &keyQueue{}
	}
	s.keys[j.key] = kq
	return true
}

// done ends the active job of key and returns the next one to start, or nil.
func (s *sequencer) done(key string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	kq := s.keys[key]
	if kq == nil {
		return nil
	}
	if len(kq.q) == 0 {
		delete(s.keys, key)
		kq.q = kq.q[:0]
		if len(s.free) < 1024 {
			s.free = append(s.free, kq)
		}
		return nil
	}
	next := kq.q[0]
	kq.q[0] = nil
	kq.q = kq.q[1:]
	return next
}
