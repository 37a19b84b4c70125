package broker

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/event"
)

// DefaultDedupEntries is the default bound on the (source, id) pairs one broker's dedup
// window remembers (WithDedupEntries).
const DefaultDedupEntries = 100_000

// dedupKey identifies an event's (source, id) by two 64-bit hashes with seeds chosen
// per process: a fixed 16 bytes whatever the attributes' lengths, and no reference to
// the request body they were read from. Two different pairs share a key with a
// probability of about n²/2¹²⁹ for n remembered pairs.
type dedupKey [2]uint64

// dedupSlot is one remembered pair, in the order it was accepted.
type dedupSlot struct {
	key dedupKey
	at  int64 // when it was accepted, Unix ns
}

// dedupWindow is a broker's sluice.dev/dedup-window: the (source, id) of every event
// accepted within the last window, at most max of them. Pairs are kept in the order
// they were accepted, so those whose window ended are at the front; when max are
// remembered, accepting one more forgets the oldest early (counted in evicted). Safe for
// concurrent use.
type dedupWindow struct {
	seeds   [2]maphash.Seed
	evicted prometheus.Counter

	mu     sync.Mutex
	window time.Duration
	max    int
	seen   map[dedupKey]int64 // key → when it was accepted (the slot's at)
	order  []dedupSlot        // order[head:] in acceptance order
	head   int
}

func newDedupWindow(window time.Duration, max int, evicted prometheus.Counter) *dedupWindow {
	return &dedupWindow{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, evicted: evicted,
		window: window, max: max, seen: map[dedupKey]int64{}}
}

// setWindow changes the window (a reload); pairs remembered keep their acceptance time.
func (w *dedupWindow) setWindow(d time.Duration) {
	w.mu.Lock()
	w.window = d
	w.mu.Unlock()
}

// key returns e's key.
func (w *dedupWindow) key(e *event.Event) dedupKey {
	var k dedupKey
	for i, seed := range w.seeds {
		var h maphash.Hash
		h.SetSeed(seed)
		h.WriteString(e.Source)
		h.WriteByte(0) // source and id cannot trade characters: "/a"+"b" ≠ "/ab"+""
		h.WriteString(e.ID)
		k[i] = h.Sum64()
	}
	return k
}

// filter returns the events of evs that were not accepted within the window, nor
// earlier in evs, and appends their keys to keys; it keeps evs' order and reuses its
// array. now is a time.Now reading.
func (w *dedupWindow) filter(evs []*event.Event, keys []dedupKey, now time.Time) ([]*event.Event, []dedupKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expireLocked(now.UnixNano())
	kept := evs[:0]
	first := len(keys)
	for _, e := range evs {
		k := w.key(e)
		if _, dup := w.seen[k]; dup || containsKey(keys[first:], k) {
			continue
		}
		kept = append(kept, e)
		keys = append(keys, k)
	}
	clear(evs[len(kept):]) // drop the pointers of the duplicates
	return kept, keys
}

func containsKey(keys []dedupKey, k dedupKey) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// accepted remembers keys, the events just stored, as accepted now: read under the lock,
// so that the pairs are kept in the order of their times.
func (w *dedupWindow) accepted(keys []dedupKey) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	at := time.Now().UnixNano()
	for _, k := range keys {
		if _, ok := w.seen[k]; ok {
			continue // a concurrent request stored it too
		}
		if len(w.seen) >= w.max {
			w.evictOldestLocked()
		}
		w.seen[k] = at
		if w.head > 0 && w.head >= len(w.order)/2 { // reuse the front half: amortised O(1)
			n := copy(w.order, w.order[w.head:])
			clear(w.order[n:])
			w.order, w.head = w.order[:n], 0
		}
		w.order = append(w.order, dedupSlot{key: k, at: at})
	}
}

// expireLocked forgets the pairs whose window has ended at now (Unix ns).
func (w *dedupWindow) expireLocked(now int64) {
	for w.head < len(w.order) {
		s := w.order[w.head]
		if now-s.at < int64(w.window) {
			return
		}
		w.dropFrontLocked()
	}
}

// evictOldestLocked forgets the oldest pair before its window ends: the set is full.
func (w *dedupWindow) evictOldestLocked() {
	if w.head < len(w.order) {
		w.dropFrontLocked()
		w.evicted.Inc()
	}
}

func (w *dedupWindow) dropFrontLocked() {
	s := w.order[w.head]
	if w.seen[s.key] == s.at {
		delete(w.seen, s.key)
	}
	w.order[w.head] = dedupSlot{}
	w.head++
}

// len returns how many pairs are remembered.
func (w *dedupWindow) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// setDedup applies sluice.dev/dedup-window: 0 turns it off and forgets every pair; a
// new window keeps the pairs remembered.
func (b *Broker) setDedup(d time.Duration) {
	if d <= 0 {
		b.dedup.Store(nil)
		return
	}
	if w := b.dedup.Load(); w != nil {
		w.setWindow(d)
		return
	}
	b.dedup.Store(newDedupWindow(d, b.srv.opts.dedupEntries, b.m.evicted))
}
