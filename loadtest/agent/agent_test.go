package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

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

// A controller stopped before its agents finish stops their runs: none outlives it,
// and each takes a new run at once.
func TestStoppedControllerStopsAgents(t *testing.T) {
	target := httptest.NewServer(receive.New(receive.Options{}))
	defer target.Close()
	var addrs []string
	for range 2 {
		s := httptest.NewServer(New(context.Background(), build))
		defer s.Close()
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(StartLead+time.Second, cancel) // a second into the run
	c := &Controller{Agents: addrs}
	m, err := c.Run(ctx, Spec{Target: target.URL, Rate: 20, Duration: 10 * time.Minute, Connections: 2, Run: "stopped"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range m.Agents {
		if a.Error == "" {
			t.Errorf("agent %s: no error, though the controller was stopped before its result", a.Addr)
		}
	}
	for _, addr := range addrs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var st Status
			if err := (&Controller{Client: http.DefaultClient}).call(context.Background(), http.MethodGet, addr, "/status", nil, http.StatusOK, &st); err != nil {
				t.Fatal(err)
			}
			if st.State != StateRunning {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s still running 30s after its controller was stopped", addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Merge equals the union: each agent's histograms go over the wire as the agent
// sends them (encodeResult, JSON, decode), and the merged latency and lag histograms
// hold, bucket by bucket, the counts of all the agents' values recorded into one.
func TestMergeEqualsUnion(t *testing.T) {
	tests := []struct {
		name   string
		agents int
		value  func(agent, v int) time.Duration
	}{
		{"overlapping", 3, func(a, v int) time.Duration { return time.Duration(v*(a+1)) * 10 * time.Microsecond }},
		{"disjoint", 3, func(a, v int) time.Duration { return time.Duration(a)*time.Second + time.Duration(v)*time.Microsecond }},
		{"out of range", 2, func(a, v int) time.Duration { return []time.Duration{0, time.Hour}[(a+v)%2] }},
		{"one agent", 1, func(_, v int) time.Duration { return time.Duration(v) * time.Millisecond }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			union, lagUnion := stats.NewHist(), stats.NewHist()
			var rs []*Result
			for a := range tt.agents {
				r := &load.Result{Requests: 1000, OK: 990, Hist: stats.NewHist(), LagHist: stats.NewHist(),
					StatusCodes: map[string]uint64{"202": 990, "503": 10}, Rate: 100, IntendedRate: 100,
					Seconds: []stats.LoadSecond{{T: 0, Intended: 100, Sent: 100, Done: 100, OK: 99}}}
				for v := range 1000 {
					d := tt.value(a, v)
					stats.Record(r.Hist, d)
					stats.Record(union, d)
					stats.Record(r.LagHist, d/3)
					stats.Record(lagUnion, d/3)
				}
				body, err := encodeResult(r)
				if err != nil {
					t.Fatal(err)
				}
				var got Result
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				if err := got.decode(); err != nil {
					t.Fatal(err)
				}
				rs = append(rs, &got)
			}
			m := Merge(rs)
			sameBuckets(t, "latency", m.Hist, union)
			sameBuckets(t, "lag", m.LagHist, lagUnion)
			if m.Latency != stats.Summarize(union) || m.Lag != stats.Summarize(lagUnion) {
				t.Errorf("latency %+v lag %+v, want %+v %+v", m.Latency, m.Lag, stats.Summarize(union), stats.Summarize(lagUnion))
			}
			n := uint64(tt.agents)
			if m.Requests != 1000*n || m.OK != 990*n || m.StatusCodes["503"] != 10*n || m.Rate != 100*float64(n) || m.IntendedRate != 100*float64(n) {
				t.Errorf("totals %+v", m)
			}
			if len(m.Seconds) != 1 || m.Seconds[0].Intended != 100*n || m.Seconds[0].OK != 99*n {
				t.Errorf("seconds %+v", m.Seconds)
			}
		})
	}
}

// sameBuckets fails unless got and want have one geometry and the same count in
// every bucket.
func sameBuckets(t *testing.T, what string, got, want *hdrhistogram.Histogram) {
	t.Helper()
	g, w := got.Export(), want.Export()
	if g.LowestTrackableValue != w.LowestTrackableValue || g.HighestTrackableValue != w.HighestTrackableValue ||
		g.SignificantFigures != w.SignificantFigures || len(g.Counts) != len(w.Counts) {
		t.Fatalf("%s: geometry %d..%d/%d with %d buckets, want %d..%d/%d with %d", what,
			g.LowestTrackableValue, g.HighestTrackableValue, g.SignificantFigures, len(g.Counts),
			w.LowestTrackableValue, w.HighestTrackableValue, w.SignificantFigures, len(w.Counts))
	}
	for i := range g.Counts {
		if g.Counts[i] != w.Counts[i] {
			t.Fatalf("%s: bucket %d holds %d, want %d", what, i, g.Counts[i], w.Counts[i])
		}
	}
	if got.TotalCount() != want.TotalCount() {
		t.Fatalf("%s: %d values, want %d", what, got.TotalCount(), want.TotalCount())
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

// A result whose histograms another geometry would be merged with losses is refused,
// naming the histogram; the agent's own encoding is accepted.
func TestResultDecodeRefusesForeignHistograms(t *testing.T) {
	enc := func(h *hdrhistogram.Histogram) string {
		b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	own := enc(stats.NewHist())
	wider := hdrhistogram.New(1, 3_600_000_000, 3) // up to an hour
	_ = wider.RecordValue(3_000_000_000)
	tests := []struct {
		name      string
		hist, lag string
		want      string // "" = accepted
	}{
		{"own geometry", own, own, ""},
		{"wider latency range", enc(wider), own, "latency histogram: range 1–3600000000"},
		{"coarser lag", own, enc(hdrhistogram.New(1, 600_000_000, 2)), "lag histogram"},
		{"not a histogram", "AAAA", own, "latency histogram"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Result{Result: &load.Result{}, HistEncoded: tt.hist, LagHistEncoded: tt.lag}
			err := r.decode()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("decode: %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzResultDecode: whatever an agent answers on /result, reading it neither panics nor
// yields histograms of another geometry than the controller merges into.
func FuzzResultDecode(f *testing.F) {
	r := &load.Result{Requests: 3, Hist: stats.NewHist(), LagHist: stats.NewHist()}
	stats.Record(r.Hist, 3*time.Millisecond)
	stats.Record(r.LagHist, time.Microsecond)
	good, err := encodeResult(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"requests":1,"hist":"","lag_hist":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var got Result
		if err := json.Unmarshal(body, &got); err != nil {
			return
		}
		if err := got.decode(); err != nil {
			return
		}
		want := stats.NewHist()
		for _, h := range []*hdrhistogram.Histogram{got.Hist, got.LagHist} {
			if h.HighestTrackableValue() != want.HighestTrackableValue() || h.SignificantFigures() != want.SignificantFigures() {
				t.Fatalf("decoded a histogram of another geometry")
			}
			if dropped := want.Merge(h); dropped != 0 {
				t.Fatalf("merge dropped %d values", dropped)
			}
		}
	})
}
