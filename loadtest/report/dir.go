package report

import (
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/slo"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Files written by WriteDir.
const (
	SummaryFile = "summary.txt"
	ResultsFile = "results.json"
	SecondsFile = "seconds.csv"
	HTMLFile    = "index.html"
)

// Saved is what results.json holds: the bench result and the SLO verdicts.
type Saved struct {
	*bench.Result
	SLO      []slo.Verdict `json:"slo,omitempty"`
	SLOPass  *bool         `json:"slo_pass,omitempty"`
	Label    string        `json:"label,omitempty"`
	Finished time.Time     `json:"finished"`
	// Distributions are the latency percentile distributions; WriteDir fills them from
	// the run's histograms (without histograms, from the summaries' percentiles).
	Distributions *Distributions `json:"distributions,omitempty"`
}

// Quantile is one point of a latency distribution: Percent % of the values are at
// most Ms milliseconds.
type Quantile struct {
	Percent float64 `json:"percent"`
	Ms      float64 `json:"ms"`
}

// Distributions are the publish and end-to-end latency distributions, at the
// percentiles HdrHistogram prints (five per halving of the distance to 100%).
type Distributions struct {
	Publish []Quantile `json:"publish"`
	E2E     []Quantile `json:"e2e"`
}

// WriteSummary writes the text summary of a bench run.
func WriteSummary(w io.Writer, s *Saved) error {
	r := s.Result
	fmt.Fprintf(w, "Target: %s   mode: %s   schedule: %s   run: %s\n\n", r.Load.Target, r.Load.Mode, r.Load.Schedule, r.Load.Run)
	fmt.Fprintln(w, "== Publish (load → target)")
	if err := WriteLoad(w, r.Load); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n== Delivery (target → receiver)")
	if err := WriteReceive(w, r.Receive); err != nil {
		return err
	}
	fmt.Fprintf(w, "Lost          [accepted, delivered, lost, lost%%]  %d, %d, %d, %.4f%%\n", r.Accepted, r.Delivered, r.Lost, r.LostPct)
	fmt.Fprintf(w, "Settle        [time, complete]                    %s, %v\n", round(r.SettleTime), r.Settled)
	if b := r.Backlog; b != nil {
		fmt.Fprintln(w, "\n== Backlog (receiver refused, then opened)")
		fmt.Fprintf(w, "Backlog       [requested, accepted, refused requests]          %d, %d, %d\n", b.Requested, b.Events, b.Refused)
		fmt.Fprintf(w, "Opened        [at]                                             %s\n", round(b.OpenedAt))
		fmt.Fprintf(w, "Drain         [time to drain, drained]                         %s, %v\n", round(b.DrainTime), b.Drained)
		fmt.Fprintf(w, "Catch-up      [events, rate, peak second]                      %d, %.2f/s, %d\n", b.CatchUpEvents, b.CatchUpRate, b.PeakCatchUp)
	}
	if len(r.Faults) > 0 {
		fmt.Fprintln(w, "\n== Faults")
		for i, f := range r.Faults {
			fmt.Fprintf(w, "%s: %s\n", faultLabel(i, f), f.Command)
			if !f.Ran {
				fmt.Fprintf(w, "  %s\n", f.Error)
				continue
			}
			fmt.Fprintf(w, "  exit %d after %s%s\n", f.ExitCode, round(f.Took), errSuffix(f.Error))
			fmt.Fprintf(w, "  recovery: ingress 2xx again after %s, backlog drained after %s; lost %d\n",
				optDur(f.IngressRecovery), optDur(f.BacklogDrain), f.Lost)
			if out := strings.TrimRight(f.OutputTail, "\n"); out != "" {
				fmt.Fprintf(w, "  output (tail):\n    %s\n", strings.ReplaceAll(out, "\n", "\n    "))
			}
		}
	}
	if len(s.SLO) > 0 {
		fmt.Fprintln(w, "\n== SLO")
		for _, v := range s.SLO {
			fmt.Fprintln(w, v.String())
		}
		if s.SLOPass != nil {
			verdict := "FAIL"
			if *s.SLOPass {
				verdict = "PASS"
			}
			fmt.Fprintln(w, "verdict:", verdict)
		}
	}
	return nil
}

// faultLabel names fault i on plots and in the summary: "fault 1 at 20s".
func faultLabel(i int, f bench.FaultRecord) string {
	return fmt.Sprintf("fault %d at %s", i+1, f.At)
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}

// optDur renders a recovery time; nil is "never".
func optDur(d *time.Duration) string {
	if d == nil {
		return "never (not within the run)"
	}
	return round(*d).String()
}

// marks returns the time plots' marks (faults that ran) and spans (a backlog's
// refusal and drain).
func marks(r *bench.Result) ([]Mark, []Span) {
	var ms []Mark
	for i, f := range r.Faults {
		if f.Ran {
			ms = append(ms, Mark{X: f.At.Seconds(), Label: faultLabel(i, f)})
		}
	}
	var sp []Span
	if b := r.Backlog; b != nil {
		open := b.OpenedAt.Seconds()
		sp = append(sp, Span{From: 0, To: open, Label: "receiver refusing", Color: 8},
			Span{From: open, To: open + b.DrainTime.Seconds(), Label: "draining", Color: 3})
	}
	return ms, sp
}

// Charts returns the plots of a run: latency by rate step (pace and ramp runs),
// the latency distributions, publish and end-to-end latency over time, throughput
// (intended, sent, accepted, delivered) and failures (failed requests, lost events,
// duplicates) per second.
func Charts(s *Saved) []Chart {
	r := s.Result
	ls, rs := r.Load.Seconds, r.Receive.Seconds
	n := max(len(ls), len(rs), len(r.LostBySecond))
	col := func(f func(i int) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	l := func(get func(s stats.LoadSecond) float64) []float64 {
		return col(func(i int) float64 {
			if i < len(ls) {
				return get(ls[i])
			}
			return 0
		})
	}
	rc := func(get func(s stats.RecvSecond) float64) []float64 {
		return col(func(i int) float64 {
			if i < len(rs) {
				return get(rs[i])
			}
			return 0
		})
	}
	epr := float64(max(r.Load.EventsPerRequest, 1))
	faultMarks, backlogSpans := marks(r)
	var out []Chart
	if len(r.Load.Steps) > 1 {
		c := Chart{File: "latency-by-step.png", Title: "Latency by rate step (solid: publish, dashed: end-to-end)",
			XLabel: "intended rate (requests/s)", YLabel: "ms"}
		pub, e2e := stepLatencies(r)
		for k, name := range []string{"p50", "p90", "p99"} {
			c.Lines = append(c.Lines, Series{Name: "publish " + name, X: pub.x, Y: pub.y[k], Color: k + 1, Points: true})
		}
		for k, name := range []string{"p50", "p90", "p99"} {
			c.Lines = append(c.Lines, Series{Name: "e2e " + name, X: e2e.x, Y: e2e.y[k], Color: k + 1, Points: true, Dashed: true})
		}
		out = append(out, c)
	}
	pub, e2e := distributions(s)
	dist := Chart{File: "latency-distribution.png", Title: "Latency by percentile", XLabel: "percentile", YLabel: "ms", Percentile: true}
	for _, d := range []struct {
		name string
		q    []Quantile
		n    uint64
	}{{"publish", pub, r.Load.Latency.Count}, {"end-to-end", e2e, r.Receive.Latency.Count}} {
		x, y := nines(d.q, d.n)
		dist.Lines = append(dist.Lines, Series{Name: d.name, X: x, Y: y})
	}
	out = append(out, dist,
		Chart{File: "publish-latency.png", Title: "Publish latency (from intended send time)", YLabel: "ms", Marks: faultMarks, Lines: []Series{
			lat(ls, "p50", func(s stats.LoadSecond) (float64, float64) { return s.P50, s.Max }),
			lat(ls, "p90", func(s stats.LoadSecond) (float64, float64) { return s.P90, s.Max }),
			lat(ls, "p99", func(s stats.LoadSecond) (float64, float64) { return s.P99, s.Max }),
			lat(ls, "max", func(s stats.LoadSecond) (float64, float64) { return s.Max, s.Max }),
		}},
		Chart{File: "e2e-latency.png", Title: "End-to-end latency (intended send → receipt)", YLabel: "ms", Marks: faultMarks, Lines: []Series{
			lat(rs, "p50", func(s stats.RecvSecond) (float64, float64) { return s.P50, s.Max }),
			lat(rs, "p90", func(s stats.RecvSecond) (float64, float64) { return s.P90, s.Max }),
			lat(rs, "p99", func(s stats.RecvSecond) (float64, float64) { return s.P99, s.Max }),
			lat(rs, "max", func(s stats.RecvSecond) (float64, float64) { return s.Max, s.Max }),
		}},
		Chart{File: "throughput.png", Title: "Throughput: sent and delivered", YLabel: "events/s", Marks: faultMarks, Spans: backlogSpans, Lines: []Series{
			{Name: "intended", Y: l(func(s stats.LoadSecond) float64 { return epr * float64(s.Intended) }), Dashed: true, Color: 8},
			{Name: "sent", Y: l(func(s stats.LoadSecond) float64 { return epr * float64(s.Sent) }), Color: 1},
			{Name: "accepted (2xx)", Y: l(func(s stats.LoadSecond) float64 { return epr * float64(s.OK) }), Color: 3},
			{Name: "delivered", Y: rc(func(s stats.RecvSecond) float64 { return float64(s.Events) }), Color: 2},
		}},
		Chart{File: "failures.png", Title: "Failures per second (lost events by send second)", YLabel: "count", Marks: faultMarks, Lines: []Series{
			{Name: "failed requests", Y: l(func(s stats.LoadSecond) float64 { return float64(s.Failed) }), Color: 4},
			{Name: "lost events", Y: col(func(i int) float64 {
				if i < len(r.LostBySecond) {
					return float64(r.LostBySecond[i])
				}
				return 0
			}), Color: 5},
			{Name: "duplicates", Y: rc(func(s stats.RecvSecond) float64 { return float64(s.Duplicates) }), Color: 2, Dashed: true},
		}},
	)
	return out
}

// lat is a latency line over time: get returns a second's value and its maximum. A
// second with no latency measured (max 0: nothing completed, or only warm-up events
// arrived) has no point, rather than a fall to 0.
func lat[S stats.LoadSecond | stats.RecvSecond](seconds []S, name string, get func(S) (v, maxMs float64)) Series {
	l := Series{Name: name, X: []float64{}, Y: []float64{}}
	for i, s := range seconds {
		if v, m := get(s); m > 0 {
			l.X = append(l.X, float64(i))
			l.Y = append(l.Y, v)
		}
	}
	return l
}

// stepSeries is one kind of latency per rate step: x the step's intended rate, y[k]
// its p50, p90 and p99 in ms.
type stepSeries struct {
	x []float64
	y [3][]float64
}

// stepLatencies returns publish and end-to-end latency per rate step. Publish latency
// comes from each step's own histogram. The receiver keeps end-to-end latency per
// second, so a step's end-to-end percentile is the mean of its seconds' percentiles
// weighted by their events (seconds counted from the load's start, as the steps are);
// a step with no events received has no end-to-end point.
func stepLatencies(r *bench.Result) (pub, e2e stepSeries) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	start := r.Load.Warmup.Seconds()
	for _, st := range r.Load.Steps {
		end := start + st.Duration.Seconds()
		pub.x = append(pub.x, st.IntendedRate)
		for k, v := range []time.Duration{st.Latency.P50, st.Latency.P90, st.Latency.P99} {
			pub.y[k] = append(pub.y[k], ms(v))
		}
		var w float64
		var sum [3]float64
		for _, s := range r.Receive.Seconds {
			if mid := float64(s.T) + 0.5; mid < start || mid >= end || s.Events == 0 {
				continue
			}
			n := float64(s.Events)
			w += n
			sum[0] += n * s.P50
			sum[1] += n * s.P90
			sum[2] += n * s.P99
		}
		if w > 0 {
			e2e.x = append(e2e.x, st.IntendedRate)
			for k := range sum {
				e2e.y[k] = append(e2e.y[k], sum[k]/w)
			}
		}
		start = end
	}
	return pub, e2e
}

// distribution lists h's percentiles as HdrHistogram prints them (values in ms).
func distribution(h *hdrhistogram.Histogram) []Quantile {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	var q []Quantile
	for _, b := range h.CumulativeDistributionWithTicks(5) {
		q = append(q, Quantile{Percent: b.Quantile, Ms: float64(b.ValueAt) / 1e3})
	}
	return q
}

// distributions returns the run's latency distributions: saved ones, else the
// histograms', else (a results.json from before distributions were saved) the summary's
// percentiles.
func distributions(s *Saved) (pub, e2e []Quantile) {
	if d := s.Distributions; d != nil {
		return d.Publish, d.E2E
	}
	pub, e2e = distribution(s.Load.Hist), distribution(s.Receive.Hist)
	if pub == nil {
		pub = summaryQuantiles(s.Load.Latency)
	}
	if e2e == nil {
		e2e = summaryQuantiles(s.Receive.Latency)
	}
	return pub, e2e
}

func summaryQuantiles(l stats.Summary) []Quantile {
	if l.Count == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return []Quantile{{0, ms(l.Min)}, {50, ms(l.P50)}, {90, ms(l.P90)}, {95, ms(l.P95)}, {99, ms(l.P99)},
		{99.9, ms(l.P999)}, {99.99, ms(l.P9999)}, {100, ms(l.Max)}}
}

// nines maps percentiles to x = −log10(1 − q) for a percentile axis. 100% (the maximum)
// goes at 1 − 1/count, the last percentile count values can tell apart; x never goes
// back.
func nines(qs []Quantile, count uint64) (x, y []float64) {
	top := math.Log10(float64(max(count, 10)))
	for _, q := range qs {
		v := top
		if q.Percent < 100 {
			v = math.Min(-math.Log10(1-q.Percent/100), top)
		}
		if len(x) > 0 && v < x[len(x)-1] {
			v = x[len(x)-1]
		}
		x = append(x, v)
		y = append(y, q.Ms)
	}
	return x, y
}

// WriteDir writes the report directory: summary.txt, results.json, seconds.csv, the
// PNG plots of Charts and a self-contained index.html.
func WriteDir(dir string, s *Saved) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	var sum bytes.Buffer
	if err := WriteSummary(&sum, s); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, SummaryFile), sum.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if s.Distributions == nil {
		c := *s
		pub, e2e := distributions(s)
		c.Distributions = &Distributions{Publish: pub, E2E: e2e}
		s = &c
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("report: encode results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := writeCSV(filepath.Join(dir, SecondsFile), s.Result); err != nil {
		return err
	}
	imgs, err := renderCharts(dir, Charts(s))
	if err != nil {
		return err
	}
	page := htmlPage{Title: "Sluice bench: " + s.Load.Target, Meta: meta(s), Tiles: tiles(s), Plots: imgs,
		Panels: []panel{{Summary: sum.String(), Steps: s.Load.Steps, SLO: s.SLO, SLOPass: s.SLOPass}}}
	return writeHTML(filepath.Join(dir, HTMLFile), page)
}

// renderCharts writes each chart's PNG into dir and returns them for the page.
func renderCharts(dir string, cs []Chart) ([]image, error) {
	var imgs []image
	for _, c := range cs {
		png, err := RenderPNG(c)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, c.File), png, 0o644); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		alt := c.Title
		for _, sp := range c.Spans {
			alt += fmt.Sprintf("; %s from %gs to %gs", sp.Label, math.Round(sp.From*10)/10, math.Round(sp.To*10)/10)
		}
		for _, m := range c.Marks {
			alt += "; " + m.Label
		}
		imgs = append(imgs, image{Title: alt, Src: dataURI(png)})
	}
	return imgs, nil
}

func dataURI(png []byte) template.URL {
	return template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png)) //nolint:gosec // our own PNG bytes
}

// writeCSV writes one row per second joining the load's and the receiver's series.
func writeCSV(name string, r *bench.Result) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"t", "warmup", "intended", "sent", "done", "ok", "failed", "pub_p50_ms", "pub_p90_ms", "pub_p99_ms", "pub_p99_9_ms", "pub_max_ms", "in_flight",
		"delivered", "duplicates", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "e2e_p99_9_ms", "e2e_max_ms", "lost"})
	ls, rs := r.Load.Seconds, r.Receive.Seconds
	n := max(len(ls), len(rs), len(r.LostBySecond))
	ff := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for i := 0; i < n; i++ {
		row := []string{strconv.Itoa(i)}
		if i < len(ls) {
			s := ls[i]
			row = append(row, strconv.FormatBool(s.Warmup), u(s.Intended), u(s.Sent), u(s.Done), u(s.OK), u(s.Failed),
				ff(s.P50), ff(s.P90), ff(s.P99), ff(s.P999), ff(s.Max), strconv.FormatInt(s.InFlight, 10))
		} else {
			row = append(row, "", "", "", "", "", "", "", "", "", "", "", "")
		}
		if i < len(rs) {
			s := rs[i]
			row = append(row, u(s.Events), u(s.Duplicates), ff(s.P50), ff(s.P90), ff(s.P99), ff(s.P999), ff(s.Max))
		} else {
			row = append(row, "", "", "", "", "", "", "")
		}
		var lost uint64
		if i < len(r.LostBySecond) {
			lost = r.LostBySecond[i]
		}
		row = append(row, u(lost))
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("report: write %s: %w", name, err)
	}
	return f.Close()
}

// Load reads a report directory's results.json.
func Load(dir string) (*Saved, error) {
	b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	s := &Saved{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("report: decode %s: %w", filepath.Join(dir, ResultsFile), err)
	}
	if s.Result == nil || s.Load == nil || s.Receive == nil {
		return nil, fmt.Errorf("report: %s is not a bench result", filepath.Join(dir, ResultsFile))
	}
	return s, nil
}
