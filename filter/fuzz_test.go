package filter

import "testing"

// FuzzCompileCESQL checks that any expression either fails to compile with an error or
// compiles to a filter that evaluates without panicking.
func FuzzCompileCESQL(f *testing.F) {
	for _, s := range []string{
		"type = 'a'", "type = ", "EXISTS region", "priority > 5 AND NOT (subject LIKE 'o%')",
		"1 / 0", "UPPER(type) IN ('A', 'B')", "))", "'unterminated", "ABS(-2147483648)",
	} {
		f.Add(s)
	}
	e := testEvent()
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := Compile(nil, []Spec{{CESQL: expr}})
		if err != nil {
			return
		}
		_ = flt.Match(e)
	})
}
