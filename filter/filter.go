// Package filter decides which events a trigger receives. It implements Knative's
// Trigger filters — the original filter.attributes map and the "new trigger filters"
// (spec.filters) that follow the CloudEvents Subscriptions API dialects exact, prefix,
// suffix, all, any, not and cesql — and an Index that routes an event to the matching
// triggers of a broker without evaluating every filter.
//
// Filters are compiled once from their spec (Compile) and are immutable afterwards: a
// Filter and an Index are safe for concurrent use by any number of goroutines. Matching
// on attributes (attributes, exact, prefix, suffix and their combinations) does not
// allocate; a cesql filter converts the event to the sdk's cloudevents.Event and does.
package filter

import (
	"github.com/sluice-broker/sluice/event"
)

// Filter reports whether an event passes. Implementations are immutable and safe for
// concurrent use.
type Filter interface {
	// Match reports whether e passes the filter. It never modifies e.
	Match(e *event.Event) bool
}

// MatchAll is the Filter of a trigger without filters: every event passes.
var MatchAll Filter = matchAll{}

type matchAll struct{}

// Match always reports true.
func (matchAll) Match(*event.Event) bool { return true }

// attr is one attribute name and the value a filter compares it with.
type attr struct {
	name  string
	value string
}
