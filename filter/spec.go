package filter

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-broker/sluice/event"
)

// Spec is one entry of a Knative Trigger's spec.filters: exactly one Subscriptions API
// dialect. Its JSON (and YAML, through sigs.k8s.io/yaml) field names are Knative's.
type Spec struct {
	// Exact passes events whose listed attributes are all present and equal the values.
	Exact map[string]string `json:"exact,omitempty"`
	// Prefix passes events whose listed attributes are all present and start with the
	// values.
	Prefix map[string]string `json:"prefix,omitempty"`
	// Suffix passes events whose listed attributes are all present and end with the
	// values.
	Suffix map[string]string `json:"suffix,omitempty"`
	// All passes events that pass every nested filter.
	All []Spec `json:"all,omitempty"`
	// Any passes events that pass at least one nested filter.
	Any []Spec `json:"any,omitempty"`
	// Not passes events that the nested filter rejects.
	Not *Spec `json:"not,omitempty"`
	// CESQL passes events for which the CloudEvents SQL expression evaluates to true.
	CESQL string `json:"cesql,omitempty"`
}

// SpecError is one problem found by Compile, located by its path in the Trigger's spec
// (for example "filters[1].any[0].prefix"). Compile returns several joined with
// errors.Join; callers that nest the spec can prefix Path.
type SpecError struct {
	Path   string
	Reason string
}

func (e *SpecError) Error() string { return e.Path + ": " + e.Reason }

// Compile builds the Filter of a Trigger from its spec.filter.attributes and
// spec.filters. As in Knative, a non-empty filters list takes precedence and attributes
// are then not used for matching (they are still validated); with neither, every event
// passes (MatchAll). All problems found are returned together, each a *SpecError.
func Compile(attributes map[string]string, filters []Spec) (Filter, error) {
	c := compiler{}
	for _, k := range sortedKeys(attributes) {
		if !event.ValidExtensionName(k) {
			c.fail("filter.attributes."+k, "invalid attribute name: lower-case letters and digits only")
		}
	}
	var f Filter = MatchAll
	switch {
	case len(filters) == 1:
		f = c.compile("filters[0]", &filters[0])
	case len(filters) > 1:
		f = &allFilter{filters: c.list("filters", filters)}
	case len(attributes) > 0:
		f = newAttributesFilter(attributes)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return f, nil
}

type compiler struct {
	errs []error
}

func (c *compiler) fail(path, format string, args ...any) {
	c.errs = append(c.errs, &SpecError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (c *compiler) list(path string, specs []Spec) []Filter {
	fs := make([]Filter, len(specs))
	for i := range specs {
		fs[i] = c.compile(fmt.Sprintf("%s[%d]", path, i), &specs[i])
	}
	return fs
}

// compile validates and compiles one dialect object; on error it records it and returns
// MatchAll as a placeholder (the result is discarded).
func (c *compiler) compile(path string, s *Spec) Filter {
	var keys []string
	if s.Exact != nil {
		keys = append(keys, "exact")
	}
	if s.Prefix != nil {
		keys = append(keys, "prefix")
	}
	if s.Suffix != nil {
		keys = append(keys, "suffix")
	}
	if s.All != nil {
		keys = append(keys, "all")
	}
	if s.Any != nil {
		keys = append(keys, "any")
	}
	if s.Not != nil {
		keys = append(keys, "not")
	}
	if s.CESQL != "" {
		keys = append(keys, "cesql")
	}
	switch len(keys) {
	case 0:
		c.fail(path, "empty: set one of exact, prefix, suffix, all, any, not, cesql")
		return MatchAll
	case 1:
	default:
		c.fail(path, "has %s: a filter takes exactly one dialect", strings.Join(keys, ", "))
		return MatchAll
	}
	switch keys[0] {
	case "exact":
		return &exactFilter{attrs: c.attrs(path+".exact", s.Exact)}
	case "prefix":
		return &prefixFilter{attrs: c.attrs(path+".prefix", s.Prefix)}
	case "suffix":
		return &suffixFilter{attrs: c.attrs(path+".suffix", s.Suffix)}
	case "all":
		if len(s.All) == 0 {
			c.fail(path+".all", "empty")
		}
		return &allFilter{filters: c.list(path+".all", s.All)}
	case "any":
		if len(s.Any) == 0 {
			c.fail(path+".any", "empty")
		}
		return &anyFilter{filters: c.list(path+".any", s.Any)}
	case "not":
		return &notFilter{filter: c.compile(path+".not", s.Not)}
	default:
		f, err := compileCESQL(s.CESQL)
		if err != nil {
			c.fail(path+".cesql", "%v", err)
			return MatchAll
		}
		return f
	}
}

// attrs validates an exact/prefix/suffix map: not empty, valid names, non-empty values
// (Knative rejects empty values in these dialects).
func (c *compiler) attrs(path string, m map[string]string) []attr {
	if len(m) == 0 {
		c.fail(path, "empty")
	}
	for _, k := range sortedKeys(m) {
		switch {
		case !event.ValidExtensionName(k):
			c.fail(path+"."+k, "invalid attribute name: lower-case letters and digits only")
		case m[k] == "":
			c.fail(path+"."+k, "empty value")
		}
	}
	return attrList(m)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
