package filter

import (
	"errors"
	"strings"
	"testing"
)

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name    string
		attrs   map[string]string
		filters []Spec
		want    []string // each must appear in the error
	}{
		{"empty dialect object", nil, []Spec{{}}, []string{"filters[0]: empty: set one of"}},
		{"two dialects", nil, []Spec{{Exact: map[string]string{"type": "a"}, Prefix: map[string]string{"type": "b"}}},
			[]string{"filters[0]: has exact, prefix: a filter takes exactly one dialect"}},
		{"empty exact map", nil, []Spec{{Exact: map[string]string{}}}, []string{"filters[0].exact: empty"}},
		{"empty suffix value", nil, []Spec{{Suffix: map[string]string{"type": ""}}}, []string{"filters[0].suffix.type: empty value"}},
		{"invalid attribute name", nil, []Spec{{Exact: map[string]string{"Type": "a"}}},
			[]string{"filters[0].exact.Type: invalid attribute name"}},
		{"nested path", nil, []Spec{
			{Exact: map[string]string{"type": "a"}},
			{Any: []Spec{{Prefix: map[string]string{}}}},
		}, []string{"filters[1].any[0].prefix: empty"}},
		{"empty all", nil, []Spec{{All: []Spec{}}}, []string{"filters[0].all: empty"}},
		{"empty any", nil, []Spec{{Any: []Spec{}}}, []string{"filters[0].any: empty"}},
		{"empty not", nil, []Spec{{Not: &Spec{}}}, []string{"filters[0].not: empty"}},
		{"cesql parse error", nil, []Spec{{All: []Spec{{CESQL: "type = "}}}}, []string{"filters[0].all[0].cesql: invalid expression"}},
		{"cesql the parser panics on", nil, []Spec{{CESQL: "type = = 'order'"}}, []string{`filters[0].cesql: invalid expression "type = = 'order'": not valid CESQL syntax`}},
		{"attribute name in filter.attributes", map[string]string{"my-ext": "a"}, nil,
			[]string{"filter.attributes.my-ext: invalid attribute name"}},
		{"all errors reported", nil, []Spec{{Exact: map[string]string{}}, {CESQL: "))"}, {Not: &Spec{Suffix: map[string]string{"A": "x"}}}},
			[]string{"filters[0].exact: empty", "filters[1].cesql: invalid expression", "filters[2].not.suffix.A: invalid attribute name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.attrs, tt.filters)
			if err == nil {
				t.Fatalf("no error, got filter %T", f)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Errorf("error %v holds no *SpecError", err)
			}
		})
	}
}
