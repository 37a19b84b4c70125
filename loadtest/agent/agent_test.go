package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

func build(s Spec) (load.Options, error) {
	t, err := cevent.NewTemplate(cevent.Binary, cevent.DefaultType, cevent.DefaultSource, s.Run, []byte(`{}`), 1)
	if err != nil {
		return load.Options{}, err
	}
	return load.Options{Target: s.Target, Pacer: pacer.Constant{Rate: s.Rate, Duration: s.Duration}, Template: t,
		Connections: s.Connections, ShareIndex: s.ShareIndex, ShareOf: s.ShareOf, StartAt: s.StartAt}, nil
}

// Three agents share a schedule: the receiver sees every sequence number once, and
// the merged result counts every request.
func TestControllerSplitsAndMerges(t *testing.T) {
	rcv := receive.New(receive.Options{})
	target := httptest.NewServer(rcv)
	defer target.Close()
	var addrs []string
	for range 3 {
		s := httptest.NewServer(New(context.Background(), build))
		defer s.Close()
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	// a fourth address that refuses connections
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()

	tests := []struct {
		name       string
		agents     []string
		wantFailed []string
		wantReqs   uint64
	}{
		{"three agents", addrs, nil, 150},
		{"one refuses", append(addrs[:2:2], refused), []string{refused}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := strings.ReplaceAll(tt.name, " ", "-")
			c := &Controller{Agents: tt.agents}
			m, err := c.Run(context.Background(), Spec{Target: target.URL, Rate: 50, Duration: 3 * time.Second, Connections: 4, Run: run}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var failed []string
			for _, a := range m.Failed() {
				if a.Error == "" {
					continue // fell behind: a rate, not decided on in tests
				}
				failed = append(failed, a.Addr)
			}
			if strings.Join(failed, ",") != strings.Join(tt.wantFailed, ",") {
				t.Errorf("failed agents %v, want %v", failed, tt.wantFailed)
			}
			if m.Result == nil || m.Requests != tt.wantReqs || m.OK != tt.wantReqs || m.Latency.Count != tt.wantReqs {
				t.Fatalf("merged result %+v, want %d requests", m.Result, tt.wantReqs)
			}
			var intended uint64
			for _, s := range m.Seconds {
				intended += s.Intended
			}
			if intended != tt.wantReqs {
				t.Errorf("per-second intended sums to %d, want %d", intended, tt.wantReqs)
			}
			var rr receive.RunReport
			for _, r := range rcv.Report().Runs {
				if r.Run == run {
					rr = r
				}
			}
			if rr.Received != tt.wantReqs || rr.Duplicates != 0 {
				t.Errorf("receiver: %+v, want %d received, no duplicates", rr, tt.wantReqs)
			}
			if tt.wantFailed == nil && rr.Lost != 0 {
				t.Errorf("receiver lost %d", rr.Lost)
			}
		})
	}
}

// Merge equals the union: the merged latency summary is that of all the agents'
// values recorded into one histogram.
func TestMergeEqualsUnion(t *testing.T) {
	union := stats.NewHist()
	var rs []*Result
	for i := range 3 {
		r := &load.Result{Requests: 1000, OK: 990, Hist: stats.NewHist(), LagHist: stats.NewHist(),
			StatusCodes: map[string]uint64{"202": 990, "503": 10}, Rate: 100, IntendedRate: 100,
			Seconds: []stats.LoadSecond{{T: 0, Intended: 100, Sent: 100, Done: 100, OK: 99}}}
		for v := range 1000 {
			d := time.Duration(v*(i+1)) * 10 * time.Microsecond
			stats.Record(r.Hist, d)
			stats.Record(union, d)
		}
		rs = append(rs, &Result{Result: r})
	}
	m := Merge(rs)
	if m.Latency != stats.Summarize(union) {
		t.Errorf("latency %+v, want %+v", m.Latency, stats.Summarize(union))
	}
	if m.Requests != 3000 || m.OK != 2970 || m.StatusCodes["503"] != 30 || m.Rate != 300 || m.IntendedRate != 300 {
		t.Errorf("totals %+v", m)
	}
	if len(m.Seconds) != 1 || m.Seconds[0].Intended != 300 || m.Seconds[0].OK != 297 {
		t.Errorf("seconds %+v", m.Seconds)
	}
}

func TestAgentRefusesBadRuns(t *testing.T) {
	a := httptest.NewServer(New(context.Background(), build))
	defer a.Close()
	addr := strings.TrimPrefix(a.URL, "http://")
	c := &Controller{Client: &http.Client{Timeout: 10 * time.Second}}
	tests := []struct {
		name string
		body any
		want string
	}{
		{"start too far ahead", Spec{Target: "http://127.0.0.1:1/", Rate: 1, Duration: time.Second, Run: "x", StartAt: time.Now().Add(time.Hour)}, "start_at"},
		{"not JSON", "[", "run spec"},
		{"bad share", Spec{Target: "http://127.0.0.1:1/", Rate: 1, Duration: time.Second, Run: "x", ShareIndex: 3, ShareOf: 2}, "share"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.call(context.Background(), http.MethodPost, addr, "/run", tt.body, http.StatusAccepted, nil)
			if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("POST /run: %v, want 400 naming %q", err, tt.want)
			}
		})
	}
}
