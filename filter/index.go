package filter

import (
	"github.com/sluice-broker/sluice/event"
)

// IndexEntry is one filter of an Index and the name Route reports when it matches.
type IndexEntry struct {
	Name   string
	Filter Filter
}

// Index routes an event to the entries whose filter it passes, evaluating only the
// filters that can match: a filter that requires an exact type (an attributes filter
// with a non-empty type, an exact dialect on type, or an all containing one) is kept
// under that type and evaluated only for events of that type; the others are evaluated
// for every event. With hundreds of triggers on distinct types, routing an event costs
// a map lookup and the few filters of its type.
//
// An Index is immutable (build a new one when the configuration changes) and safe for
// concurrent use.
type Index struct {
	entries   []IndexEntry
	byType    map[string][]int32 // entry indices, ascending
	unindexed []int32            // entry indices, ascending
}

// NewIndex builds an Index over entries, which it copies. A nil Filter matches every
// event.
func NewIndex(entries []IndexEntry) *Index {
	x := &Index{
		entries: append([]IndexEntry(nil), entries...),
		byType:  make(map[string][]int32),
	}
	for i := range x.entries {
		if x.entries[i].Filter == nil {
			x.entries[i].Filter = MatchAll
		}
		if t, ok := exactType(x.entries[i].Filter); ok {
			x.byType[t] = append(x.byType[t], int32(i))
		} else {
			x.unindexed = append(x.unindexed, int32(i))
		}
	}
	return x
}

// Len returns the number of entries.
func (x *Index) Len() int { return len(x.entries) }

// Route appends to dst the names of the entries whose filter e passes, in the order the
// entries were given, and returns the extended slice. It does not allocate when dst has
// room for the result and no cesql filter is evaluated.
func (x *Index) Route(e *event.Event, dst []string) []string {
	typed := x.byType[e.Type]
	un := x.unindexed
	// Merge the two ascending index lists so names come out in entry order.
	for len(typed) > 0 || len(un) > 0 {
		var i int32
		if len(un) == 0 || (len(typed) > 0 && typed[0] < un[0]) {
			i, typed = typed[0], typed[1:]
		} else {
			i, un = un[0], un[1:]
		}
		if x.entries[i].Filter.Match(e) {
			dst = append(dst, x.entries[i].Name)
		}
	}
	return dst
}
