package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary be the health probe child, as the suite's own binary is
// (startHealthProbe runs os.Executable()).
func TestMain(m *testing.M) {
	asHealthProbeChild()
	os.Exit(m.Run())
}

// slowMetrics answers 200 to every path, /metrics after 120 ms.
func slowMetrics(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			time.Sleep(120 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHealthProbeChild runs the probe in its own process against a server whose
// /metrics is slow, and checks that its report comes back whole over the pipe.
func TestHealthProbeChild(t *testing.T) {
	srv := slowMetrics(t)
	p, err := startHealthProbe(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(900 * time.Millisecond) // four rounds of the three paths, at 200 ms
	h, err := p.stop()
	if err != nil {
		t.Fatal(err)
	}
	if h.answers < 6 || h.over100 < 2 || h.over100*3 > h.answers+2 {
		t.Errorf("answers %d, ≥ 100 ms %d: want at least two rounds, a third of them slow", h.answers, h.over100)
	}
	if h.slowestPath != "/metrics" || h.slowest < 120*time.Millisecond || h.failures != 0 {
		t.Errorf("slowest %s on %q, %d failures: want /metrics ≥ 120 ms, none", h.slowest, h.slowestPath, h.failures)
	}
	if p.cmd.ProcessState == nil || !p.cmd.ProcessState.Exited() {
		t.Errorf("the child has not exited: %v", p.cmd.ProcessState)
	}
}

// TestHealthReportRoundTrip checks that every field of health survives the pipe's form.
func TestHealthReportRoundTrip(t *testing.T) {
	h := health{slowest: 345 * time.Millisecond, slowestPath: "/healthz", slowestAt: 200 * time.Millisecond, answers: 297, over100: 1, failures: 2}
	if got := h.report().health(); got != h {
		t.Fatalf("round trip: got %+v, want %+v", got, h)
	}
}
