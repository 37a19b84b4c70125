package event

import (
	"strconv"
	"strings"
	"testing"
)

// TestFirstDuplicateLinear: the duplicate check looks at each name a bounded number of
// times, however many there are (compared pairwise, 50,000 names took 1.25 billion
// looks), and finds the first repeat either way.
func TestFirstDuplicateLinear(t *testing.T) {
	for _, n := range []int{0, 1, 2, pairwiseMax, pairwiseMax + 1, 1000, 50000} {
		names := make([]string, n)
		for i := range names {
			names[i] = "x" + strconv.Itoa(i)
		}
		looks := 0
		name := func(i int) string { looks++; return names[i] }
		if i := firstDuplicate(n, name); i != -1 {
			t.Errorf("n=%d: duplicate at %d among distinct names", n, i)
		}
		if limit := max(n, pairwiseMax*pairwiseMax); looks > limit {
			t.Errorf("n=%d: %d looks at names, want at most %d", n, looks, limit)
		}
		if n < 2 {
			continue
		}
		names[n-1] = names[(n-1)/2]
		if i := firstDuplicate(n, func(i int) string { return names[i] }); i != n-1 {
			t.Errorf("n=%d: duplicate at %d, want %d", n, i, n-1)
		}
	}
}

func TestValidUTF8JSON(t *testing.T) {
	tests := []struct {
		json string
		want bool
	}{
		{`"plain"`, true},
		{`"é€😀"`, true},
		{`"\u00e9\n\t\\\"\/"`, true},
		{`"\ud83d\ude00"`, true},
		{`"\uD83D\uDE00"`, true},
		{`"\ud800"`, false},
		{`"\udc00"`, false},
		{`"\ud800\u0041"`, false},
		{`"\ud800x"`, false},
		{`"\ude00\ud83d"`, false},
		{`"\\ud800"`, true},   // an escaped backslash, then text
		{`"\\\ud800"`, false}, // an escaped backslash, then a lone half
		{`"\ufffd"`, true},
		{"\"\xff\"", false},
		{"\"\xed\xa0\x80\"", false},
		{`{"a":["\ud800"]}`, false},
		{`12`, true},
	}
	for _, tt := range tests {
		if got := validUTF8JSON([]byte(tt.json)); got != tt.want {
			t.Errorf("validUTF8JSON(%s) = %v, want %v", tt.json, got, tt.want)
		}
	}
}

// TestDecodeBinaryManyExtensions: the storage codec decodes an event with many
// extensions (one stored before the attribute limit) in one pass, and refuses a
// repeated extension as corrupt.
func TestDecodeBinaryManyExtensions(t *testing.T) {
	e := &Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t"}
	for i := range 20000 {
		e.Extensions = append(e.Extensions, Extension{Name: "x" + strconv.Itoa(i), Value: "v"})
	}
	got, err := DecodeBinary(AppendBinary(nil, e))
	if err != nil || len(got.Extensions) != 20000 || got.Extensions[19999].Name != "x19999" {
		t.Fatalf("decoded %d extensions, err %v", len(got.Extensions), err)
	}
	e.Extensions[19999].Name = "x7"
	if _, err := DecodeBinary(AppendBinary(nil, e)); err == nil || !strings.Contains(err.Error(), "x7 twice") {
		t.Fatalf("repeated extension: err = %v, want it refused", err)
	}
}
