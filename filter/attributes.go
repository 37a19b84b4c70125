package filter

import (
	"sort"

	"github.com/sluice-broker/sluice/event"
)

// attributesFilter is Knative's spec.filter.attributes: every listed attribute must equal
// its value, and the value "" matches any value.
//
// Knative (pkg/eventfilter/attributes) treats "" differently for context attributes and
// extensions, and Sluice does the same: for a context attribute (specversion, id,
// source, type, subject, time, dataschema, datacontenttype, and Knative's legacy
// schemaurl, datamediatype and datacontentencoding) "" matches whether or not the event
// sets it; for an extension "" requires the extension to be present, with any value.
type attributesFilter struct {
	attrs []attr // sorted by name; type first when present, as it is the most selective
}

var _ Filter = (*attributesFilter)(nil)

func newAttributesFilter(m map[string]string) *attributesFilter {
	f := &attributesFilter{attrs: make([]attr, 0, len(m))}
	for k, v := range m {
		f.attrs = append(f.attrs, attr{k, v})
	}
	sortAttrs(f.attrs)
	return f
}

// sortAttrs sorts by name, with "type" first.
func sortAttrs(a []attr) {
	sort.Slice(a, func(i, j int) bool {
		if (a[i].name == event.AttrType) != (a[j].name == event.AttrType) {
			return a[i].name == event.AttrType
		}
		return a[i].name < a[j].name
	})
}

// knativeContextAttribute reports the names Knative's attributes filter always knows,
// set or not.
func knativeContextAttribute(name string) bool {
	switch name {
	case event.AttrSpecVersion, event.AttrID, event.AttrSource, event.AttrType,
		event.AttrSubject, event.AttrTime, event.AttrDataSchema, event.AttrDataContentType,
		"schemaurl", "datamediatype", "datacontentencoding":
		return true
	}
	return false
}

// Match reports whether e carries every attribute with its value.
func (f *attributesFilter) Match(e *event.Event) bool {
	for _, a := range f.attrs {
		v, ok := e.Get(a.name)
		if a.value == "" {
			if !ok && !knativeContextAttribute(a.name) {
				return false
			}
			continue
		}
		if !ok || v != a.value {
			return false
		}
	}
	return true
}

// exactType returns the type value the filter requires, if any.
func (f *attributesFilter) exactType() (string, bool) {
	for _, a := range f.attrs {
		if a.name == event.AttrType && a.value != "" {
			return a.value, true
		}
	}
	return "", false
}
