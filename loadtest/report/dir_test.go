package report

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/slo"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

func runBench(t *testing.T, rate float64) *Saved {
	t.Helper()
	tm, err := cevent.NewTemplate(cevent.Binary, cevent.DefaultType, cevent.DefaultSource, "rep"+strings.ReplaceAll(t.Name(), "/", ""), bytes.Repeat([]byte("x"), 2048), 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bench.Run(context.Background(), bench.Options{
		Load:         load.Options{Pacer: pacer.Steps{{Rate: rate, Duration: time.Second}, {Rate: 2 * rate, Duration: time.Second}}, Template: tm, Connections: 32},
		ReceiverAddr: "127.0.0.1:0", Direct: true, Settle: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := slo.Parse("loss=0,success>=99,e2e.p50<1s")
	if err != nil {
		t.Fatal(err)
	}
	v, pass := slo.Check(objs, res.Metrics())
	return &Saved{Result: res, SLO: v, SLOPass: &pass, Finished: time.Now()}
}

// TestBenchReportDir runs a quick direct bench (≈2 s at 250 then 500 ev/s) and checks
// the report directory.
func TestBenchReportDir(t *testing.T) {
	s := runBench(t, 250)
	if s.Lost != 0 || s.Accepted != 750 || !s.Settled || s.Receive.Events != 750 {
		t.Errorf("accepted %d lost %d settled %v received %d; want 750 0 true 750", s.Accepted, s.Lost, s.Settled, s.Receive.Events)
	}
	if !*s.SLOPass {
		t.Errorf("SLO failed: %v", s.SLO)
	}
	dir := t.TempDir()
	if err := WriteDir(dir, s); err != nil {
		t.Fatal(err)
	}
	files := []string{SummaryFile, ResultsFile, SecondsFile, HTMLFile}
	charts := Charts(s)
	for _, c := range charts {
		files = append(files, c.File)
	}
	// Two steps: latency by step, distribution, publish and e2e latency over time,
	// throughput, failures.
	if len(charts) != 6 || charts[0].File != "latency-by-step.png" || charts[1].File != "latency-distribution.png" {
		t.Errorf("charts %v, want latency-by-step.png, latency-distribution.png and 4 over time", chartFiles(charts))
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	html, _ := os.ReadFile(filepath.Join(dir, HTMLFile))
	if n := bytes.Count(html, []byte(`src="data:image/png;base64,`)); n != len(charts) {
		t.Errorf("index.html embeds %d plots, want %d", n, len(charts))
	}
	selfContained(t, html)
	back, err := Load(dir)
	if err != nil || back.Accepted != s.Accepted || len(back.Load.Steps) != 2 {
		t.Fatalf("Load = %+v, %v", back, err)
	}
	if d := back.Distributions; d == nil || len(d.Publish) < 10 || len(d.E2E) < 10 || d.Publish[len(d.Publish)-1].Percent != 100 {
		t.Errorf("results.json distributions = %+v, want both with the percentiles up to 100", d)
	}

	// Three runs compared: three columns, and a line per run on each plot.
	cmp := t.TempDir()
	names := []string{"alpha", "bravo", "charlie"}
	if err := Compare(cmp, []*Saved{back, back, back}, names); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SummaryFile, HTMLFile} {
		if st, err := os.Stat(filepath.Join(cmp, f)); err != nil || st.Size() == 0 {
			t.Errorf("compare %s missing or empty: %v", f, err)
		}
	}
	sum, _ := os.ReadFile(filepath.Join(cmp, SummaryFile))
	head, _, _ := strings.Cut(string(sum), "\n")
	if f := strings.Fields(head); len(f) != 4 || f[0] != "metric" || f[1] != "alpha" || f[2] != "bravo" || f[3] != "charlie" {
		t.Errorf("compare summary header %q, want metric and the three labels", head)
	}
	page, _ := os.ReadFile(filepath.Join(cmp, HTMLFile))
	for _, n := range names {
		if !bytes.Contains(page, []byte("<th>"+n+"</th>")) {
			t.Errorf("compare page has no column %s", n)
		}
	}
	selfContained(t, page)
	cc := compareCharts([]*Saved{back, back, back}, names)
	if n := bytes.Count(page, []byte(`src="data:image/png;base64,`)); n != len(cc) || len(cc) != 6 {
		t.Errorf("compare page embeds %d plots, compareCharts %d; want 6", n, len(cc))
	}
	for _, c := range cc {
		labels := map[string]bool{}
		for _, l := range c.Lines {
			labels[strings.Fields(l.Name)[0]] = true
		}
		if len(labels) != 3 || !labels["alpha"] || !labels["bravo"] || !labels["charlie"] {
			t.Errorf("compare plot %s has lines %v, want one per run", c.File, labels)
		}
	}
	if err := Compare(t.TempDir(), []*Saved{back, back}, []string{"one"}); err == nil || !strings.Contains(err.Error(), "1 names for 2 runs") {
		t.Errorf("Compare with too few names: %v", err)
	}
}

func chartFiles(cs []Chart) []string {
	var f []string
	for _, c := range cs {
		f = append(f, c.File)
	}
	return f
}

// selfContained fails if the page loads anything from outside itself.
func selfContained(t *testing.T, html []byte) {
	t.Helper()
	for _, bad := range []string{`src="http`, `href=`, "<link", "<script", "url(", "@import"} {
		if bytes.Contains(html, []byte(bad)) {
			t.Errorf("page refers to an external resource: contains %q", bad)
		}
	}
}

// TestCountAxesStartAtZero: a plot's y axis starts at 0 and is never empty — a flat 0
// shows 0…1, not gonum's −1…1.
func TestCountAxesStartAtZero(t *testing.T) {
	tests := []struct {
		name    string
		lines   []Series
		wantMax float64 // 0: any value above the data's maximum
	}{
		{"all zero", []Series{{Name: "failed", Y: []float64{0, 0, 0, 0}}}, 1},
		{"two all-zero lines", []Series{{Name: "failed", Y: []float64{0, 0}}, {Name: "lost", Y: []float64{0, 0, 0}}}, 1},
		{"one zero point", []Series{{Name: "lost", Y: []float64{0}}}, 1},
		{"no values", []Series{{Name: "lost"}}, 1},
		{"no lines", nil, 1},
		{"small counts", []Series{{Name: "failed", Y: []float64{0, 1, 0, 2}}}, 0},
		{"large values", []Series{{Name: "sent", Y: []float64{900, 1000, 1100}}, {Name: "delivered", Y: []float64{899, 1001, 1099}}}, 0},
		{"zero and rising", []Series{{Name: "p99", X: []float64{500, 1000, 2000}, Y: []float64{0, 0.5, 3}}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPlot(Chart{Title: tc.name, YLabel: "count", Lines: tc.lines})
			if err != nil {
				t.Fatal(err)
			}
			top := 0.0
			for _, l := range tc.lines {
				for _, y := range l.Y {
					top = max(top, y)
				}
			}
			if p.Y.Min != 0 || !(p.Y.Max > top) || (tc.wantMax != 0 && p.Y.Max != tc.wantMax) {
				t.Errorf("y axis %v…%v; want 0…%v (data up to %v)", p.Y.Min, p.Y.Max, tc.wantMax, top)
			}
			if p.X.Min < 0 || !(p.X.Max > p.X.Min) {
				t.Errorf("x axis %v…%v", p.X.Min, p.X.Max)
			}
			if _, err := RenderPNG(Chart{Title: tc.name, Lines: tc.lines}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPercentileAxis: HdrHistogram's "1 − q" axis.
func TestPercentileAxis(t *testing.T) {
	for nines, want := range []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%"} {
		if got := percentileLabel(float64(nines)); got != want {
			t.Errorf("percentileLabel(%d) = %q, want %q", nines, got, want)
		}
	}
	x, y := nines([]Quantile{{0, 1}, {50, 2}, {90, 3}, {99, 4}, {99.99, 5}, {100, 6}}, 1000)
	want := []float64{0, math.Log10(2), 1, 2, 3, 3} // 99.99% and the maximum cannot pass 1 − 1/1000
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-9 || y[i] != float64(i+1) {
			t.Errorf("point %d at (%v, %v), want (%v, %v)", i, x[i], y[i], want[i], i+1)
		}
	}
}

func TestWriteLoadLayout(t *testing.T) {
	r := &load.Result{Requests: 10, OK: 9, Success: 0.9, StatusCodes: map[string]uint64{"202": 9, "0": 1},
		Errors: map[string]uint64{"dial tcp: refused": 1}, Steps: []load.StepResult{{Step: 1}, {Step: 2}}}
	var b bytes.Buffer
	if err := WriteLoad(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Requests", "[total, rate, throughput]", "Duration", "[total, attack, wait]",
		"Latencies", "[min, mean, 50, 90, 95, 99, max]", "[99.9, 99.99]", "Bytes In", "Bytes Out", "Success", "90.00%",
		"Status Codes", "0:1  202:9", "Error Set:", "dial tcp: refused", "intended/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestStepLatencies: publish latency per step is the step's own; end-to-end latency per
// step weights the percentiles of the seconds inside the step (after the warm-up) by
// their events, and a step with no events received has no end-to-end point.
func TestStepLatencies(t *testing.T) {
	ms := time.Millisecond
	r := &bench.Result{
		Load: &load.Result{Warmup: time.Second, Steps: []load.StepResult{
			{Step: 1, IntendedRate: 100, Duration: 2 * time.Second, Latency: stats.Summary{P50: 1 * ms, P90: 2 * ms, P99: 3 * ms}},
			{Step: 2, IntendedRate: 200, Duration: time.Second, Latency: stats.Summary{P50: 4 * ms, P90: 5 * ms, P99: 6 * ms}},
			{Step: 3, IntendedRate: 400, Duration: time.Second, Latency: stats.Summary{P50: 7 * ms, P90: 8 * ms, P99: 9 * ms}},
		}},
		Receive: &receive.Report{Seconds: []stats.RecvSecond{
			{T: 0, Events: 50, P50: 100, P90: 100, P99: 100}, // warm-up: left out
			{T: 1, Events: 100, P50: 1, P90: 2, P99: 4},      // step 1
			{T: 2, Events: 300, P50: 3, P90: 6, P99: 8},      // step 1
			{T: 3, Events: 200, P50: 10, P90: 20, P99: 30},   // step 2
			{T: 4, Events: 0}, // step 3: nothing received
		}},
	}
	pub, e2e := stepLatencies(r)
	if fmt.Sprint(pub.x, pub.y) != "[100 200 400] [[1 4 7] [2 5 8] [3 6 9]]" {
		t.Errorf("publish by step: x %v y %v", pub.x, pub.y)
	}
	// step 1: (100·1 + 300·3)/400 = 2.5, (100·2 + 300·6)/400 = 5, (100·4 + 300·8)/400 = 7
	if fmt.Sprint(e2e.x, e2e.y) != "[100 200] [[2.5 10] [5 20] [7 30]]" {
		t.Errorf("e2e by step: x %v y %v", e2e.x, e2e.y)
	}
}

// TestOldResultsDistribution: a results.json written before distributions were saved
// (no histograms either) still plots latency by percentile, from the summary's
// percentiles; a run with nothing received plots no end-to-end line and no error.
func TestOldResultsDistribution(t *testing.T) {
	ms := time.Millisecond
	s := &Saved{Result: &bench.Result{
		Load: &load.Result{Latency: stats.Summary{Count: 1000, Min: ms, P50: 2 * ms, P90: 3 * ms, P95: 4 * ms, P99: 5 * ms, P999: 6 * ms, P9999: 7 * ms, Max: 8 * ms},
			Seconds: []stats.LoadSecond{{T: 0, Sent: 1000, OK: 1000}}},
		Receive: &receive.Report{},
	}}
	pub, e2e := distributions(s)
	if len(pub) != 8 || pub[7] != (Quantile{100, 8}) || e2e != nil {
		t.Errorf("distributions = %v, %v; want the summary's 8 percentiles and none", pub, e2e)
	}
	dir := t.TempDir()
	if err := WriteDir(dir, s); err != nil {
		t.Fatal(err)
	}
	for _, c := range Charts(s) {
		if st, err := os.Stat(filepath.Join(dir, c.File)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", c.File, err)
		}
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Charts(back) {
		if c.File == "latency-distribution.png" && (len(c.Lines) != 2 || len(c.Lines[0].Y) != 8 || len(c.Lines[1].Y) != 0) {
			t.Errorf("reloaded distribution plot %+v, want 8 publish points and no e2e", c.Lines)
		}
	}
}

// TestLatencyOverTimeSkipsEmptySeconds: a second with no latency measured has no point
// on a latency plot (it does not fall to 0).
func TestLatencyOverTimeSkipsEmptySeconds(t *testing.T) {
	rs := []stats.RecvSecond{{T: 0, Events: 10}, {T: 1, Events: 10, P50: 1, Max: 2}, {T: 2}, {T: 3, Events: 5, P50: 3, Max: 4}}
	l := lat(rs, "p50", func(s stats.RecvSecond) (float64, float64) { return s.P50, s.Max })
	if fmt.Sprint(l.X, l.Y) != "[1 3] [1 3]" {
		t.Errorf("p50 line x %v y %v, want points at seconds 1 and 3 only", l.X, l.Y)
	}
}

// TestPlainTicks: tick labels carry no trailing zeros, and an axis has at least three.
func TestPlainTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 1}, {0, 2.8}, {0, 3.1}, {0, 1260}, {500, 3000}, {0, 0.004}} {
		var labels []string
		for _, tk := range (plainTicks{}).Ticks(r[0], r[1]) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
				if strings.Contains(tk.Label, ".") && strings.HasSuffix(tk.Label, "0") {
					t.Errorf("%v: label %q has a trailing zero", r, tk.Label)
				}
			}
		}
		if len(labels) < 3 {
			t.Errorf("%v: labels %q, want at least 3", r, labels)
		}
	}
}
