package dlq

import (
	"sort"
	"time"
)

// Index is what a store holds of its dead letters in memory: per trigger a list of
// entries, oldest first, bounded by Limits as entries are added. A store that keeps its
// entries in a log (a Kafka topic, a RabbitMQ stream) applies each change it reads to its
// Index in log order, so that every reader holds the same entries; the memory store is an
// Index and a lock.
//
// Each entry carries a tag of type T: what its store needs besides the entry (a record's
// key, a position in the log). IDs must grow within a trigger's list: Add takes an entry
// whose ID is above every ID of its trigger's list.
//
// Besides its entries, an Index counts per trigger the entries evicted outside Add
// (expired by Expire, or evicted by EvictOldestWhile for room the trigger did not ask
// for), for the store to report with that trigger's next Put (TakeExpired).
//
// An Index is not safe for concurrent use: its store guards it.
type Index[T any] struct {
	lim   Limits
	lists map[string]*indexList[T]
	bytes int64 // of all triggers
	n     int   // entries of all triggers
}

// Item is an entry of an Index and its tag.
type Item[T any] struct {
	Entry Entry
	Tag   T
}

// indexList is one trigger's entries, oldest first.
type indexList[T any] struct {
	items   []Item[T]
	bytes   int64
	expired int // evicted outside Add, reported by TakeExpired
}

// NewIndex returns an empty Index bounded by lim per trigger (see Limits.Validate).
func NewIndex[T any](lim Limits) *Index[T] {
	return &Index[T]{lim: lim, lists: make(map[string]*indexList[T])}
}

// Len returns how many entries x holds, all triggers together.
func (x *Index[T]) Len() int { return x.n }

// Bytes returns the bytes (Entry.Size) x holds, all triggers together.
func (x *Index[T]) Bytes() int64 { return x.bytes }

// Add appends e with tag to trigger's list, after evicting (oldest first) the entries
// older than Limits.MaxAge before e.Time, then those MaxEntries and MaxBytes require to
// make room for e. It returns what it evicted. An entry larger than MaxBytes (written by
// a replica with other limits) is not kept: it is returned too, last.
func (x *Index[T]) Add(trigger string, e Entry, tag T) (evicted []Item[T]) {
	l := x.lists[trigger]
	if l == nil {
		l = &indexList[T]{}
		x.lists[trigger] = l
	}
	cut := e.Time.Add(-x.lim.MaxAge)
	for len(l.items) > 0 && l.items[0].Entry.Time.Before(cut) {
		evicted = append(evicted, x.drop(l, 0))
	}
	it := Item[T]{Entry: e, Tag: tag}
	if size := e.Size(); size <= x.lim.MaxBytes {
		for len(l.items) > 0 && (len(l.items)+1 > x.lim.MaxEntries || l.bytes+size > x.lim.MaxBytes) {
			evicted = append(evicted, x.drop(l, 0))
		}
		l.items = append(l.items, it)
		l.bytes += size
		x.bytes += size
		x.n++
	} else {
		evicted = append(evicted, it)
	}
	x.tidy(trigger, l)
	return evicted
}

// Expire evicts trigger's entries older than Limits.MaxAge before now, counts them for
// TakeExpired and returns them.
func (x *Index[T]) Expire(trigger string, now time.Time) []Item[T] {
	l := x.lists[trigger]
	if l == nil {
		return nil
	}
	var expired []Item[T]
	cut := now.Add(-x.lim.MaxAge)
	for len(l.items) > 0 && l.items[0].Entry.Time.Before(cut) {
		expired = append(expired, x.drop(l, 0))
	}
	l.expired += len(expired)
	return expired
}

// TakeExpired returns how many of trigger's entries were evicted outside Add since the
// last TakeExpired of trigger, and starts that count again from 0.
func (x *Index[T]) TakeExpired(trigger string) int {
	l := x.lists[trigger]
	if l == nil {
		return 0
	}
	n := l.expired
	l.expired = 0
	x.tidy(trigger, l)
	return n
}

// EvictOldestWhile evicts the oldest entry of x, whatever its trigger (IDs grow across
// triggers), as long as over holds for it, and returns how many of those were trigger's.
// The others are counted for TakeExpired of their triggers.
func (x *Index[T]) EvictOldestWhile(trigger string, over func(Item[T]) bool) int {
	n := 0
	for {
		var oldest *indexList[T]
		var name string
		for k, l := range x.lists {
			if len(l.items) > 0 && (oldest == nil || l.items[0].Entry.ID < oldest.items[0].Entry.ID) {
				oldest, name = l, k
			}
		}
		if oldest == nil || !over(oldest.items[0]) {
			return n
		}
		x.drop(oldest, 0)
		if name == trigger {
			n++
		} else {
			oldest.expired++
		}
		x.tidy(name, oldest)
	}
}

// Page returns up to limit (ClampPage) entries of trigger whose ID is above after,
// oldest first.
func (x *Index[T]) Page(trigger string, after uint64, limit int) Page {
	l := x.lists[trigger]
	if l == nil {
		return Page{}
	}
	limit = ClampPage(limit)
	i := sort.Search(len(l.items), func(i int) bool { return l.items[i].Entry.ID > after })
	end := min(i+limit, len(l.items))
	p := Page{Entries: make([]Entry, 0, end-i), Total: len(l.items), Bytes: l.bytes}
	for _, it := range l.items[i:end] {
		p.Entries = append(p.Entries, it.Entry)
	}
	if end < len(l.items) {
		p.Next = l.items[end-1].Entry.ID
	}
	if n := len(l.items); n > 0 {
		p.Last = l.items[n-1].Entry.ID
	}
	return p
}

// Get returns trigger's entry id, and whether x holds it.
func (x *Index[T]) Get(trigger string, id uint64) (Item[T], bool) {
	l := x.lists[trigger]
	if l == nil {
		return Item[T]{}, false
	}
	if i, ok := l.find(id); ok {
		return l.items[i], true
	}
	return Item[T]{}, false
}

// Items returns a copy of trigger's entries, oldest first.
func (x *Index[T]) Items(trigger string) []Item[T] {
	l := x.lists[trigger]
	if l == nil {
		return nil
	}
	return append([]Item[T](nil), l.items...)
}

// Delete removes trigger's entry id and returns it, and whether x held it.
func (x *Index[T]) Delete(trigger string, id uint64) (Item[T], bool) {
	l := x.lists[trigger]
	if l == nil {
		return Item[T]{}, false
	}
	i, ok := l.find(id)
	if !ok {
		return Item[T]{}, false
	}
	it := x.drop(l, i)
	x.tidy(trigger, l)
	return it, true
}

// Purge removes every entry of trigger and returns how many there were. The count for
// TakeExpired stays.
func (x *Index[T]) Purge(trigger string) int {
	l := x.lists[trigger]
	if l == nil {
		return 0
	}
	n := len(l.items)
	x.bytes -= l.bytes
	x.n -= n
	l.items, l.bytes = nil, 0
	x.tidy(trigger, l)
	return n
}

// Reset removes every entry and count of every trigger.
func (x *Index[T]) Reset() {
	clear(x.lists)
	x.bytes, x.n = 0, 0
}

// find returns the index of entry id in l, and whether l holds it.
func (l *indexList[T]) find(id uint64) (int, bool) {
	i := sort.Search(len(l.items), func(i int) bool { return l.items[i].Entry.ID >= id })
	return i, i < len(l.items) && l.items[i].Entry.ID == id
}

// drop removes l's entry at index i and returns it.
func (x *Index[T]) drop(l *indexList[T], i int) Item[T] {
	it := l.items[i]
	size := it.Entry.Size()
	l.bytes -= size
	x.bytes -= size
	x.n--
	if i == 0 {
		l.items[0] = Item[T]{}
		l.items = l.items[1:]
		return it
	}
	copy(l.items[i:], l.items[i+1:])
	l.items[len(l.items)-1] = Item[T]{}
	l.items = l.items[:len(l.items)-1]
	return it
}

// tidy forgets trigger's list l once it holds nothing and counts nothing.
func (x *Index[T]) tidy(trigger string, l *indexList[T]) {
	if len(l.items) == 0 && l.expired == 0 {
		delete(x.lists, trigger)
	}
}
