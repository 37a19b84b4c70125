package main

import (
	"testing"
	"time"
)

// TestHealthObserve checks what the health probes keep of their answers: the slowest
// with its path and time, and the count of answers of 100 ms or more.
func TestHealthObserve(t *testing.T) {
	var h health
	for _, a := range []struct {
		path     string
		at, took time.Duration
	}{
		{"/healthz", 200 * time.Millisecond, 120 * time.Millisecond},
		{"/readyz", 320 * time.Millisecond, 100 * time.Millisecond},
		{"/metrics", 420 * time.Millisecond, 30 * time.Millisecond},
		{"/metrics", 5 * time.Second, 99 * time.Millisecond},
	} {
		h.observe(a.path, a.at, a.took)
	}
	want := health{slowest: 120 * time.Millisecond, slowestPath: "/healthz", slowestAt: 200 * time.Millisecond, answers: 4, over100: 2}
	if h != want {
		t.Fatalf("got %+v, want %+v", h, want)
	}
}

func TestHealthMeasured(t *testing.T) {
	tests := []struct {
		o    overloadResult
		want string
	}{
		{overloadResult{HealthMaxMS: 120.06, HealthSlowestPath: "/metrics", HealthSlowestAtS: 0.4, HealthAnswers: 399, HealthOver100: 1},
			"slowest 120.1 ms (/metrics asked at 0.4 s), 1 of 399 answers ≥ 100 ms, 0 failures"},
		// Results written before the path and counts were kept.
		{overloadResult{HealthMaxMS: 20, HealthFailures: 2}, "slowest 20.0 ms, 2 failures"},
	}
	for _, tt := range tests {
		if got := healthMeasured(&tt.o); got != tt.want {
			t.Errorf("healthMeasured = %q, want %q", got, tt.want)
		}
	}
}
