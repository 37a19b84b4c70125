package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestMain lets the test binary be the health probe child, as the suite's own binary is
// (startHealthProbe runs os.Executable()).
func TestMain(m *testing.M) {
	asHealthProbeChild()
	os.Exit(m.Run())
}

// slowMetrics answers 200 to every path, /metrics after 120 ms, and counts the
// requests for /metrics it has received.
func slowMetrics(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var metrics atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			metrics.Add(1)
			time.Sleep(120 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &metrics
}

// TestHealthProbeChild runs the probe in its own process against a server whose
// /metrics is slow, and checks that its report comes back whole over the pipe.
func TestHealthProbeChild(t *testing.T) {
	srv, metrics := slowMetrics(t)
	p, err := startHealthProbe(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// A round asks /healthz, /readyz, then /metrics, one after the other: once the third
	// /metrics has arrived, the child has seen two whole rounds and two paths of a third,
	// however slowly the machine let it get there. The wait only bounds a hang.
	sluicetest.Eventually(t, 60*time.Second, "the probe's third round", func() bool { return metrics.Load() >= 3 })
	h, err := p.stop()
	if err != nil {
		t.Fatal(err)
	}
	if h.answers < 8 || h.over100 < 2 {
		t.Errorf("answers %d, ≥ 100 ms %d: want at least 8 answers, 2 of them the slow /metrics", h.answers, h.over100)
	}
	// Which path was slowest is the machine's to decide (a loaded one can hold /healthz
	// longer than /metrics' 120 ms): only that the slowest took at least that is certain.
	if h.slowest < 120*time.Millisecond || h.slowestPath == "" || h.failures != 0 {
		t.Errorf("slowest %s on %q, %d failures: want ≥ 120 ms on a path, none", h.slowest, h.slowestPath, h.failures)
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
