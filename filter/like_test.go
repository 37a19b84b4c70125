package filter

import (
	"strings"
	"testing"
)

// sdkLike is the LIKE matcher of github.com/cloudevents/sdk-go/sql/v2 v2.16.2
// (expression/like_expression.go, Copyright 2021 The CloudEvents Authors, Apache License
// 2.0), which Sluice used before: the reference the new matcher is checked against.
func sdkLike(text, pattern string) bool {
	textLen, patternLen := len(text), len(pattern)
	textIdx, patternIdx, lastWildcardIdx, lastMatchIdx := 0, 0, -1, 0
	if patternLen == 0 {
		return patternLen == textLen
	}
	for textIdx < textLen {
		if patternIdx < patternLen-1 && pattern[patternIdx] == '\\' &&
			((pattern[patternIdx+1] == '_' || pattern[patternIdx+1] == '%') &&
				pattern[patternIdx+1] == text[textIdx]) {
			patternIdx += 2
			textIdx++
		} else if patternIdx < patternLen && (pattern[patternIdx] == '_' || pattern[patternIdx] == text[textIdx]) {
			textIdx++
			patternIdx++
		} else if patternIdx < patternLen && pattern[patternIdx] == '%' {
			lastWildcardIdx = patternIdx
			lastMatchIdx = textIdx
			patternIdx++
		} else if lastWildcardIdx != -1 {
			patternIdx = lastWildcardIdx + 1
			lastMatchIdx++
			textIdx = lastMatchIdx
		} else {
			return false
		}
	}
	for patternIdx < patternLen {
		if pattern[patternIdx] != '%' {
			return false
		}
		patternIdx++
	}
	return true
}

// TestLikeTable: LIKE's wildcards and escapes, each case checked against the sdk's
// matcher too. The sdk reads "\_" as a backslash and a wildcard when the value has a
// backslash there; Sluice reads it always as the escape the CESQL specification makes
// it: the cases marked differ.
func TestLikeTable(t *testing.T) {
	long := strings.Repeat("ab", 100)
	for _, tc := range []struct {
		value, pattern string
		want           bool
		sdkDiffers     bool
	}{
		{"", "", true, false},
		{"a", "", false, false},
		{"", "%", true, false},
		{"", "%%", true, false},
		{"", "_", false, false},
		{"abc", "abc", true, false},
		{"abc", "ab", false, false},
		{"abc", "abcd", false, false},
		{"abc", "a%", true, false},
		{"abc", "%c", true, false},
		{"abc", "%b%", true, false},
		{"abc", "%d%", false, false},
		{"abc", "a%b%c", true, false},
		{"azzzbzzzc", "a%b%c", true, false},
		{"ac", "a%b%c", false, false},
		{"abcabc", "%bc", true, false},
		{"abcab", "%bc", false, false},
		{"aXbXc", "a_b_c", true, false},
		{"abc", "a_b_c", false, false},
		{"abc", "___", true, false},
		{"abc", "____", false, false},
		{"abc", "_%_", true, false},
		{"ab", "_%_%_", false, false},
		{"a_c", `a\_c`, true, false},
		{"abc", `a\_c`, false, false},
		{"a%c", `a\%c`, true, false},
		{"abbc", `a\%c`, false, false},
		{"100%", `%\%`, true, false},
		{"100", `%\%`, false, false},
		{`a\c`, `a\c`, true, false},
		{`a\`, `a\`, true, false},
		{`a\\`, `a\\`, true, false},
		{"é", "_", false, false}, // '_' is one byte, as in the sdk
		{"é", "__", true, false},
		{"xaaaab", "%a_b", true, false},
		{"xaaaab", "%a__b", true, false},
		{"xaaaab", "%a____b", false, false},
		{long, "%" + strings.Repeat("ab", 40) + "%", true, false},
		{long, "%" + strings.Repeat("a_", 40) + "%", true, false},
		{long, "%" + strings.Repeat("a_", 40) + "c%", false, false},
		{long + "c", "%" + strings.Repeat("_b", 40) + "c", true, false},
		{`a\b`, `a\_`, false, true},  // the sdk: a literal backslash, then '_' takes "b"
		{`a\xy`, `a\%`, false, true}, // the sdk: a literal backslash, then '%'
	} {
		got := compileLike(tc.pattern).match(tc.value)
		if got != tc.want {
			t.Errorf("%q LIKE %q = %v, want %v", tc.value, tc.pattern, got, tc.want)
		}
		if sdk := sdkLike(tc.value, tc.pattern); (sdk != got) != tc.sdkDiffers {
			t.Errorf("%q LIKE %q: the sdk says %v, Sluice %v; a difference is expected: %v", tc.value, tc.pattern, sdk, got, tc.sdkDiffers)
		}
	}
}

// TestLikePatternBound: a LIKE pattern over MaxLikePattern bytes is a configuration error
// naming the filter and the bound; one at the bound compiles and matches.
func TestLikePatternBound(t *testing.T) {
	at := strings.Repeat("a", MaxLikePattern-1) + "%"
	f, err := Compile(nil, []Spec{{CESQL: "subject LIKE '" + at + "'"}})
	if err != nil {
		t.Fatalf("pattern of %d bytes: %v", len(at), err)
	}
	if f.Match(testEvent()) {
		t.Errorf("matched")
	}
	over := strings.Repeat("a%", 5<<10) // 10 KiB
	_, err = Compile(nil, []Spec{{Any: []Spec{{CESQL: "type = 'x'"}, {CESQL: "subject NOT LIKE '" + over + "'"}}}})
	if err == nil {
		t.Fatal("a pattern of 10 KiB compiled")
	}
	for _, want := range []string{"filters[0].any[1].cesql", "LIKE pattern of 10240 bytes", "at most 1024"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if len(err.Error()) > 1024 {
		t.Errorf("error of %d bytes: the expression is quoted whole", len(err.Error()))
	}
}

// TestLikeInExpressions: LIKE keeps its place in the tree (NOT LIKE, with AND/OR,
// on a cast value).
func TestLikeInExpressions(t *testing.T) {
	e := testEvent()
	for expr, want := range map[string]bool{
		"subject LIKE 'order/%'":                         true,
		"subject NOT LIKE 'order/%'":                     false,
		"subject LIKE 'order/__' AND region LIKE 'eu-%'": true,
		"subject LIKE 'x%' OR type LIKE '%.created'":     true,
		"NOT (subject LIKE '%/42')":                      false,
		"priority LIKE '_'":                              true,
		"missing LIKE '%'":                               false,
		"subject LIKE \"order/%\"":                       true,
		`subject LIKE 'order/42' AND 'it\'s' LIKE 'it%'`: true,
	} {
		f, err := Compile(nil, []Spec{{CESQL: expr}})
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if got := f.Match(e); got != want {
			t.Errorf("%s = %v, want %v", expr, got, want)
		}
	}
}

// FuzzLike: on values without a backslash (where the sdk's escapes are not ambiguous),
// the matcher agrees with the sdk's.
func FuzzLike(f *testing.F) {
	for _, s := range [][2]string{{"abc", "a%c"}, {"a_c", `a\_c`}, {"aXbXc", "a_b_c"}, {"xaaaab", "%a__b"},
		{"100%", `%\%`}, {"", "%"}, {strings.Repeat("ab", 50), "%" + strings.Repeat("a_", 40) + "%"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, value, pattern string) {
		if strings.Contains(value, `\`) || len(pattern) > MaxLikePattern {
			return
		}
		if got, want := compileLike(pattern).match(value), sdkLike(value, pattern); got != want {
			t.Fatalf("%q LIKE %q = %v, the sdk says %v", value, pattern, got, want)
		}
	})
}

// BenchmarkLike: a 60 KB subject against patterns of 1 KiB that make the sdk's matcher
// backtrack at every byte and Sluice's scan the whole subject, through both; then a
// cesql filter with such a pattern.
func BenchmarkLike(b *testing.B) {
	subject := strings.Repeat("a", 60<<10)
	for _, p := range []struct{ name, pattern string }{
		{"literal", "%" + strings.Repeat("a", MaxLikePattern-3) + "b%"},
		{"wildcards", "%" + strings.Repeat("a_", (MaxLikePattern-4)/2) + "b%"},
	} {
		b.Run(p.name+"/sdk", func(b *testing.B) {
			for b.Loop() {
				sdkLike(subject, p.pattern)
			}
		})
		lp := compileLike(p.pattern)
		b.Run(p.name+"/sluice", func(b *testing.B) {
			for b.Loop() {
				lp.match(subject)
			}
		})
	}
	e := testEvent()
	e.Subject = subject
	f, err := Compile(nil, []Spec{{CESQL: "subject LIKE '%" + strings.Repeat("a_", (MaxLikePattern-4)/2) + "b%'"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("filter", func(b *testing.B) {
		for b.Loop() {
			f.Match(e)
		}
	})
}
