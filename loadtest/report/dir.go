package report

import (
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/slo"
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

// Charts returns the six series Knative's performance suite tracks, over time.
func Charts(r *bench.Result) []Chart {
	ls, rs := r.Load.Seconds, r.Receive.Seconds
	n := max(len(ls), len(rs), len(r.LostBySecond))
	col := func(f func(i int) float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	l := func(get func(i int) float64) []float64 {
		return col(func(i int) float64 {
			if i < len(ls) {
				return get(i)
			}
			return 0
		})
	}
	rc := func(get func(i int) float64) []float64 {
		return col(func(i int) float64 {
			if i < len(rs) {
				return get(i)
			}
			return 0
		})
	}
	return []Chart{
		{File: "publish-latency.png", Title: "Publish latency (from intended send time)", YLabel: "ms", Lines: []Series{
			{"p50", l(func(i int) float64 { return ls[i].P50 })},
			{"p90", l(func(i int) float64 { return ls[i].P90 })},
			{"p99", l(func(i int) float64 { return ls[i].P99 })},
			{"max", l(func(i int) float64 { return ls[i].Max })},
		}},
		{File: "e2e-latency.png", Title: "End-to-end latency (intended send → receipt)", YLabel: "ms", Lines: []Series{
			{"p50", rc(func(i int) float64 { return rs[i].P50 })},
			{"p90", rc(func(i int) float64 { return rs[i].P90 })},
			{"p99", rc(func(i int) float64 { return rs[i].P99 })},
			{"max", rc(func(i int) float64 { return rs[i].Max })},
		}},
		{File: "send-throughput.png", Title: "Send throughput", YLabel: "requests/s", Lines: []Series{
			{"intended", l(func(i int) float64 { return float64(ls[i].Intended) })},
			{"sent", l(func(i int) float64 { return float64(ls[i].Sent) })},
			{"2xx", l(func(i int) float64 { return float64(ls[i].OK) })},
		}},
		{File: "delivery-throughput.png", Title: "Delivery throughput", YLabel: "events/s", Lines: []Series{
			{"delivered", rc(func(i int) float64 { return float64(rs[i].Events) })},
			{"duplicates", rc(func(i int) float64 { return float64(rs[i].Duplicates) })},
		}},
		{File: "send-failures.png", Title: "Send failures (non-2xx or transport error)", YLabel: "requests/s", Lines: []Series{
			{"failed", l(func(i int) float64 { return float64(ls[i].Failed) })},
		}},
		{File: "lost-events.png", Title: "Lost events (2xx from target, never delivered), by send second", YLabel: "events", Lines: []Series{
			{"lost", col(func(i int) float64 {
				if i < len(r.LostBySecond) {
					return float64(r.LostBySecond[i])
				}
				return 0
			})},
		}},
	}
}

// WriteDir writes the report directory: summary.txt, results.json, seconds.csv, the six
// PNG plots and a self-contained index.html.
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
	var imgs []image
	for _, c := range Charts(s.Result) {
		png, err := RenderPNG(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.File), png, 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		imgs = append(imgs, image{Title: c.Title, Src: dataURI(png)})
	}
	page := htmlPage{Title: "Sluice bench: " + s.Load.Target, Panels: []panel{{
		Name: s.Label, Summary: sum.String(), Steps: s.Load.Steps, SLO: s.SLO, Images: imgs,
	}}}
	return writeHTML(filepath.Join(dir, HTMLFile), page)
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
