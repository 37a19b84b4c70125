package event

import (
	"bytes"
	"testing"
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
