package httpserver

import (
	"net/http"
	"testing"
	"time"
)

// TestDateCache checks that the cached Date value names the current second, across
// second boundaries (the cache is kept by the monotonic clock, formatted by the wall's).
func TestDateCache(t *testing.T) {
	var d dateCache
	for range 4 {
		before := time.Now().Truncate(time.Second)
		got, err := http.ParseTime(string(d.get()))
		after := time.Now()
		if err != nil {
			t.Fatalf("Date %q: %v", d.get(), err)
		}
		if got.Before(before) || got.After(after) {
			t.Fatalf("Date names %v, want the second of a time in [%v, %v]", got, before, after)
		}
		time.Sleep(400 * time.Millisecond)
	}
}
