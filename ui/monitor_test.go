package ui

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/delivery"
)

// TestMonitorRates samples a registry holding series named as Sluice's and checks the
// rates, totals, histories and percentiles of the snapshots.
func TestMonitorRates(t *testing.T) {
	reg := prometheus.NewRegistry()
	accepted := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_events_accepted_total"}, []string{"broker"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_requests_rejected_total"}, []string{"broker", "reason"})
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_queue_depth"}, []string{"broker", "trigger"})
	delivered := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_delivery_delivered_total"}, []string{"trigger"})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_delivery_attempts_total"}, []string{"trigger", "dest", "result"})
	limit := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_delivery_inflight_limit"}, []string{"trigger"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_delivery_latency_seconds",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"trigger"})
	reg.MustRegister(accepted, rejected, depth, delivered, attempts, limit, latency)

	m, err := New(WithGatherer(reg), WithRateWindow(2*time.Second), WithLatencyWindow(3*time.Second), WithWindow(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 6 { // second i: 100 accepted, 90 delivered, 10 failed; 3 rejected
		accepted.WithLabelValues("ns/b").Add(100)
		rejected.WithLabelValues("ns/b", "full").Add(3)
		delivered.WithLabelValues("ns/t").Add(90)
		attempts.WithLabelValues("ns/t", "subscriber", "2xx").Add(90)
		attempts.WithLabelValues("ns/t", "subscriber", "5xx").Add(10)
		attempts.WithLabelValues("ns/t", "deadletter", "5xx").Add(7) // not the subscriber's
		depth.WithLabelValues("ns/b", "ns/t").Set(float64(i))
		limit.WithLabelValues("ns/t").Set(32)
		for k := range 100 { // latencies: 1 ms … 100 ms, uniform
			latency.WithLabelValues("ns/t").Observe(float64(k+1) / 1000)
		}
		m.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	s := m.Snapshot()
	if len(s.Brokers) != 1 || len(s.Triggers) != 1 {
		t.Fatalf("brokers %v triggers %v", s.Brokers, s.Triggers)
	}
	b, tr := s.Brokers[0], s.Triggers[0]
	near := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol {
			t.Errorf("%s = %v, want %v ± %v", what, got, want, tol)
		}
	}
	near("accepted_total", b.AcceptedTotal, 600, 0)
	near("rejected_total", b.RejectedTotal, 18, 0)
	near("ingress_rate", b.IngressRate, 100, 1e-9)
	near("rejected_rate", b.RejectedRate, 3, 1e-9)
	near("delivery_rate", tr.DeliveryRate, 90, 1e-9)
	near("failure_rate", tr.FailureRate, 10, 1e-9)
	near("failed_total", tr.FailedTotal, 60, 0)
	near("queue_depth", tr.QueueDepth, 5, 0)
	near("inflight_limit", tr.InFlightLimit, 32, 0)
	if tr.Broker != "ns/b" {
		t.Errorf("trigger's broker %q", tr.Broker)
	}
	// Uniform 1–100 ms: the median is ~50 ms, p99 ~99 ms; buckets double from 0.5 ms, so
	// the interpolation is only as good as the bucket (32–64 ms and 64–128 ms).
	if tr.P50 == nil || *tr.P50 < 32 || *tr.P50 > 64 || tr.P99 == nil || *tr.P99 < 64 || *tr.P99 > 128 {
		t.Errorf("p50 %v p99 %v", deref(tr.P50), deref(tr.P99))
	}
	if n := len(b.History.T); n != 6 || len(b.History.Ingress) != 6 || b.History.Ingress[0] != 0 || b.History.Ingress[5] != 100 {
		t.Errorf("history: %d points, ingress %v", n, b.History.Ingress)
	}
	// The window keeps 11 points.
	for i := 6; i < 20; i++ {
		m.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	s = m.Snapshot()
	if n := len(s.Triggers[0].History.T); n != 11 {
		t.Errorf("history of %d points, want 11 (10 s window)", n)
	}
	near("idle ingress_rate", s.Brokers[0].IngressRate, 0, 0)
	if s.Triggers[0].P50 != nil {
		t.Errorf("p50 %v with nothing delivered in the latency window, want null", *s.Triggers[0].P50)
	}
	// A removed trigger's series go: so does its row.
	depth.Reset()
	delivered.Reset()
	attempts.Reset()
	limit.Reset()
	latency.Reset()
	m.Sample(t0.Add(21 * time.Second))
	if s := m.Snapshot(); len(s.Triggers) != 0 {
		t.Errorf("triggers after their series went: %v", s.Triggers)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004}
	for _, tt := range []struct {
		name     string
		cur, old []float64 // cumulative counts per bucket
		curN     float64
		oldN     float64
		q        float64
		want     any // ms, or nil
	}{
		{"empty", []float64{0, 0, 0}, nil, 0, 0, 0.5, nil},
		{"all in the first bucket", []float64{10, 10, 10}, nil, 10, 0, 0.5, 0.5},
		{"interpolated in the second", []float64{0, 10, 10}, nil, 10, 0, 0.5, 1.5},
		{"beyond the last bound", []float64{0, 0, 0}, nil, 10, 0, 0.5, 4.0},
		{"only what is new", []float64{10, 20, 20}, []float64{10, 10, 10}, 20, 10, 0.5, 1.5},
	} {
		got := quantile(tt.q, &triggerCum{bounds: bounds, counts: tt.cur, count: tt.curN}, &triggerCum{bounds: bounds, counts: tt.old, count: tt.oldN})
		if fmt.Sprint(deref(got)) != fmt.Sprint(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, deref(got), tt.want)
		}
	}
}

func TestDeadLettersNewestFirst(t *testing.T) {
	m, err := New(WithGatherer(prometheus.NewRegistry()), WithDeadLetters(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		m.DeadLetter(delivery.DeadLetter{ID: fmt.Sprint(i)})
	}
	m.Sample(time.Now())
	s := m.Snapshot()
	var ids []string
	for _, d := range s.DeadLetters {
		ids = append(ids, d.ID)
	}
	if strings.Join(ids, ",") != "4,3,2" || s.DeadLettersSeen != 5 {
		t.Errorf("dead letters %v, seen %d; want 4,3,2 and 5", ids, s.DeadLettersSeen)
	}
}

func TestHandler(t *testing.T) {
	m, err := New(WithGatherer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/ui", http.StatusFound, ""},
		{"GET", "/ui/", http.StatusOK, "text/html; charset=utf-8"},
		{"GET", "/ui/snapshot.json", http.StatusOK, "application/json"},
		{"GET", "/ui/nope", http.StatusNotFound, ""},
		{"POST", "/ui/", http.StatusMethodNotAllowed, ""},
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var snap Snapshot
		if tt.path == SnapshotPath {
			if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
				t.Errorf("snapshot: %v", err)
			}
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || (tt.ctype != "" && resp.Header.Get("Content-Type") != tt.ctype) {
			t.Errorf("%s %s: %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.status, tt.ctype)
		}
	}
	for path, want := range map[string]bool{"/ui": true, "/ui/": true, "/ui/snapshot.json": true, "/ui/orders": false, "/uix": false, "/": false} {
		if Handles(path) != want {
			t.Errorf("Handles(%q) = %v, want %v", path, !want, want)
		}
	}
	if _, err := New(); err == nil || !strings.Contains(err.Error(), "WithGatherer") {
		t.Errorf("New without a gatherer: %v", err)
	}
	if _, err := New(WithGatherer(prometheus.NewRegistry()), WithLatencyWindow(time.Hour)); err == nil || !strings.Contains(err.Error(), "WithLatencyWindow") {
		t.Errorf("latency window beyond the window: %v", err)
	}
}

// TestNotReady: every snapshot marks the brokers WithNotReady names not ready with their
// reason, lists one no metric names yet, and the others ready.
func TestNotReady(t *testing.T) {
	reg := prometheus.NewRegistry()
	accepted := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_events_accepted_total"}, []string{"broker"})
	reg.MustRegister(accepted)
	accepted.WithLabelValues("ns/up").Add(1)
	accepted.WithLabelValues("ns/down").Add(1)
	var nr map[string]string
	m, err := New(WithGatherer(reg), WithNotReady(func() map[string]string { return nr }))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name, reason string
		ready        bool
	}
	tests := []struct {
		name     string
		notReady map[string]string
		want     []row
	}{
		{"all ready", nil, []row{{"ns/down", "", true}, {"ns/up", "", true}}},
		{"one down", map[string]string{"ns/down": "cannot store events: x"},
			[]row{{"ns/down", "cannot store events: x", false}, {"ns/up", "", true}}},
		{"one down with no metric yet", map[string]string{"ns/new": "cannot store events: y"},
			[]row{{"ns/down", "", true}, {"ns/new", "cannot store events: y", false}, {"ns/up", "", true}}},
	}
	t0 := time.Unix(1_800_000_000, 0)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nr = tt.notReady
			m.Sample(t0.Add(time.Duration(i) * time.Second))
			var got []row
			for _, b := range m.Snapshot().Brokers {
				got = append(got, row{b.Name, b.NotReadyReason, b.Ready})
				if b.History.T == nil || b.History.Ingress == nil {
					t.Errorf("broker %s: history with null slices (the page draws them)", b.Name)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("brokers %+v, want %+v", got, tt.want)
			}
		})
	}
}
