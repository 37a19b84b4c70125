package filter

import (
	"strings"

	"github.com/sluice-broker/sluice/event"
)

// exactFilter is the Subscriptions API "exact" dialect: every attribute must be present
// and equal its value.
type exactFilter struct{ attrs []attr }

// prefixFilter is the "prefix" dialect: every attribute must be present and start with
// its value.
type prefixFilter struct{ attrs []attr }

// suffixFilter is the "suffix" dialect: every attribute must be present and end with its
// value.
type suffixFilter struct{ attrs []attr }

// allFilter is the "all" dialect: every sub-filter must match (true when empty).
type allFilter struct{ filters []Filter }

// anyFilter is the "any" dialect: at least one sub-filter must match (false when empty).
type anyFilter struct{ filters []Filter }

// notFilter is the "not" dialect: the sub-filter must not match.
type notFilter struct{ filter Filter }

var (
	_ Filter = (*exactFilter)(nil)
	_ Filter = (*prefixFilter)(nil)
	_ Filter = (*suffixFilter)(nil)
	_ Filter = (*allFilter)(nil)
	_ Filter = (*anyFilter)(nil)
	_ Filter = (*notFilter)(nil)
)

func attrList(m map[string]string) []attr {
	a := make([]attr, 0, len(m))
	for k, v := range m {
		a = append(a, attr{k, v})
	}
	sortAttrs(a)
	return a
}

// Match reports whether every attribute is present and equal to its value.
func (f *exactFilter) Match(e *event.Event) bool {
	for _, a := range f.attrs {
		if v, ok := e.Get(a.name); !ok || v != a.value {
			return false
		}
	}
	return true
}

func (f *exactFilter) exactType() (string, bool) {
	for _, a := range f.attrs {
		if a.name == event.AttrType {
			return a.value, true
		}
	}
	return "", false
}

// Match reports whether every attribute is present and starts with its value.
func (f *prefixFilter) Match(e *event.Event) bool {
	for _, a := range f.attrs {
		if v, ok := e.Get(a.name); !ok || !strings.HasPrefix(v, a.value) {
			return false
		}
	}
	return true
}

// Match reports whether every attribute is present and ends with its value.
func (f *suffixFilter) Match(e *event.Event) bool {
	for _, a := range f.attrs {
		if v, ok := e.Get(a.name); !ok || !strings.HasSuffix(v, a.value) {
			return false
		}
	}
	return true
}

// Match reports whether every sub-filter matches.
func (f *allFilter) Match(e *event.Event) bool {
	for _, g := range f.filters {
		if !g.Match(e) {
			return false
		}
	}
	return true
}

func (f *allFilter) exactType() (string, bool) {
	for _, g := range f.filters {
		if t, ok := exactType(g); ok {
			return t, true
		}
	}
	return "", false
}

// Match reports whether at least one sub-filter matches.
func (f *anyFilter) Match(e *event.Event) bool {
	for _, g := range f.filters {
		if g.Match(e) {
			return true
		}
	}
	return false
}

// Match reports whether the sub-filter does not match.
func (f *notFilter) Match(e *event.Event) bool { return !f.filter.Match(e) }

// typed is implemented by filters that pass only events of one exact type.
type typed interface {
	exactType() (string, bool)
}

// exactType returns the type every event passing f must have, if f requires one.
func exactType(f Filter) (string, bool) {
	if t, ok := f.(typed); ok {
		return t.exactType()
	}
	return "", false
}
