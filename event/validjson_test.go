package event

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestHasControl(t *testing.T) {
	for i := 0; i < 256; i++ {
		for _, n := range []int{1, 7, 8, 9, 17} { // the byte at every position of words and tails
			for pos := 0; pos < n; pos++ {
				b := bytes.Repeat([]byte{'a'}, n)
				b[pos] = byte(i)
				if got, want := hasControl(b), i < 0x20; got != want {
					t.Fatalf("hasControl(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "nl\ncr\rtab\t", "\x00\x01\x07\x0b\x1f\x7f",
		"é€𝄞", "\u2028\u2029", "\U0010ffff", "\uFEFF"} {
		out := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Errorf("appendJSONString(%q) = %s: not JSON: %v", s, out, err)
		} else if got != s {
			t.Errorf("appendJSONString(%q) = %s, which decodes to %q", s, out, got)
		}
	}
}

// FuzzAppendJSONString: any valid UTF-8 string, written by appendJSONString, decodes
// back to itself with encoding/json.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"a", "\x01\a\v", `"\`, "\U0010ffff", "é\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		out := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(out, &got); err != nil || got != s {
			t.Fatalf("appendJSONString(%q) = %s: decodes to %q, %v", s, out, got, err)
		}
	})
}
