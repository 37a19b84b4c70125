package overload

import (
	"net/http"
	"testing"
	"time"
)

// TestInFlightAIMD: explicit signals halve the limit at most once per window, successes
// add one per window back up to the maximum, other failures change nothing, a latency
// climb cuts no lower than the climb floor; the limit is applied whenever it changes.
// A fixed limit never moves.
func TestInFlightAIMD(t *testing.T) {
	applied := 32
	l := NewInFlight(32, true, func(n int) { applied = n })
	now := time.Now()
	ms := time.Millisecond
	l.Observe(ms, http.StatusServiceUnavailable, false, now)
	if got := l.Current(); got != 16 {
		t.Fatalf("after a 503 limit = %d, want 16", got)
	}
	l.Observe(ms, http.StatusServiceUnavailable, false, now.Add(ms))
	if got := l.Current(); got != 16 {
		t.Fatalf("a second 503 within the window cut again: %d", got)
	}
	l.Observe(ms, http.StatusTooManyRequests, false, now.Add(10*ms))
	if got := l.Current(); got != 8 {
		t.Fatalf("after a 429 a window later limit = %d, want 8", got)
	}
	for range 9 { // about one window's worth of successes adds one
		l.Observe(ms, http.StatusOK, false, now.Add(20*ms))
	}
	if got := l.Current(); got != 9 {
		t.Fatalf("after 9 successes at limit 8, limit = %d, want 9", got)
	}
	l.Observe(ms, http.StatusBadRequest, false, now.Add(30*ms))
	if got := l.Current(); got != 9 {
		t.Errorf("a 400 changed the limit to %d", got)
	}
	for range 2000 {
		l.Observe(ms, http.StatusOK, false, now.Add(40*ms))
	}
	if got := l.Current(); got != 32 {
		t.Errorf("limit %d after recovery, want the maximum 32", got)
	}
	// A latency climb (1 ms → 20 ms) is a congestion signal.
	for range 50 {
		l.Observe(20*ms, http.StatusOK, false, now.Add(time.Second))
	}
	if got := l.Current(); got >= 32 {
		t.Errorf("latency climb did not cut the limit: %d", got)
	}
	// A climb alone never cuts below the climb floor (32/8 = 4), however long it lasts.
	for i := range 100 {
		l.Observe(20*ms, http.StatusOK, false, now.Add(time.Second+time.Duration(i)*time.Second))
	}
	if got := l.Current(); got != 4 {
		t.Errorf("after a long latency climb limit = %d, want the climb floor 4", got)
	}
	// The explicit signals still cut to 1.
	for i := range 10 {
		l.Observe(ms, http.StatusServiceUnavailable, false, now.Add(time.Hour+time.Duration(i)*time.Second))
	}
	if got := l.Current(); got != 1 {
		t.Errorf("after repeated 503s limit = %d, want 1", got)
	}
	if applied != 1 {
		t.Errorf("applied %d, want the limit 1", applied)
	}
	fixed := NewInFlight(32, false, func(n int) { t.Errorf("a fixed limit applied %d", n) })
	fixed.Observe(ms, http.StatusServiceUnavailable, false, now)
	if got := fixed.Current(); got != 32 {
		t.Errorf("non-adaptive limit moved to %d", got)
	}
}
