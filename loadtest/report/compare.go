package report

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Compare renders saved bench runs side by side into dir: summary.txt (a table of the
// headline figures, one column per run, each after the first with its ratio to the
// first) and index.html (the table, plots with one line per run, and every run's
// summary). names label the runs, in order.
func Compare(dir string, runs []*Saved, names []string) error {
	if len(runs) == 0 {
		return errors.New("report: compare: no runs")
	}
	if len(names) != len(runs) {
		return fmt.Errorf("report: compare: %d names for %d runs", len(names), len(runs))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	head, rows := headline(runs, names)
	var sum bytes.Buffer
	tw := tabwriter.NewWriter(&sum, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	fmt.Fprintln(&sum)
	for i, s := range runs {
		fmt.Fprintf(&sum, "%s: %s, %s\n", names[i], s.Load.Target, s.Load.Schedule)
	}
	if err := os.WriteFile(filepath.Join(dir, SummaryFile), sum.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	imgs, err := renderCharts(dir, compareCharts(runs, names))
	if err != nil {
		return err
	}
	var panels []panel
	for i, s := range runs {
		var b bytes.Buffer
		if err := WriteSummary(&b, s); err != nil {
			return err
		}
		panels = append(panels, panel{Name: names[i], Summary: b.String(), Steps: s.Load.Steps, SLO: s.SLO, SLOPass: s.SLOPass})
	}
	return writeHTML(filepath.Join(dir, HTMLFile), htmlPage{
		Title: "Sluice bench: " + strings.Join(names, " vs "), Head: head, Rows: rows, Plots: imgs, Panels: panels,
	})
}

// headline returns the table of headline figures: a column per run, and from the
// second run on each cell also holds the ratio to the first run's value.
func headline(runs []*Saved, names []string) (head []string, rows [][]string) {
	dur := func(v float64) string { return round(time.Duration(v)).String() }
	num := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	pct := func(v float64) string { return fmt.Sprintf("%.3f%%", v) }
	metrics := []struct {
		name string
		get  func(s *Saved) float64
		f    func(float64) string
	}{
		{"intended rate (req/s)", func(s *Saved) float64 { return s.Load.IntendedRate }, num},
		{"send rate (req/s)", func(s *Saved) float64 { return s.Load.Rate }, num},
		{"delivery rate (events/s)", func(s *Saved) float64 { return s.Receive.Rate }, num},
		{"success", func(s *Saved) float64 { return 100 * s.Load.Success }, pct},
		{"publish p50", func(s *Saved) float64 { return float64(s.Load.Latency.P50) }, dur},
		{"publish p99", func(s *Saved) float64 { return float64(s.Load.Latency.P99) }, dur},
		{"publish p99.9", func(s *Saved) float64 { return float64(s.Load.Latency.P999) }, dur},
		{"e2e p50", func(s *Saved) float64 { return float64(s.Receive.Latency.P50) }, dur},
		{"e2e p99", func(s *Saved) float64 { return float64(s.Receive.Latency.P99) }, dur},
		{"e2e p99.9", func(s *Saved) float64 { return float64(s.Receive.Latency.P999) }, dur},
		{"delivered events", func(s *Saved) float64 { return float64(s.Delivered) }, count},
		{"lost events", func(s *Saved) float64 { return float64(s.Lost) }, count},
		{"duplicates", func(s *Saved) float64 { return float64(s.Receive.Duplicates) }, count},
	}
	head = append([]string{"metric"}, names...)
	for _, m := range metrics {
		first := m.get(runs[0])
		row := []string{m.name}
		for i, s := range runs {
			v := m.get(s)
			cell := m.f(v)
			if i > 0 && first != 0 {
				cell += fmt.Sprintf(" (%.2f×)", v/first)
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	return head, rows
}

// compareCharts overlays the runs: one colour per run; where a chart holds two kinds
// of line, the second is dashed.
func compareCharts(runs []*Saved, names []string) []Chart {
	per := make([]map[string]Chart, len(runs))
	steps := false
	for i, s := range runs {
		per[i] = map[string]Chart{}
		for _, c := range Charts(s) {
			per[i][c.File] = c
		}
		steps = steps || len(s.Load.Steps) > 1
	}
	// overlay builds a chart from the line named line of each run's chart file
	// (and, dashed, line2 when given).
	overlay := func(c Chart, file, line, line2, suffix, suffix2 string) Chart {
		c.File = "compare-" + c.File
		for i := range runs {
			src := per[i][file]
			for _, l := range src.Lines {
				switch l.Name {
				case line:
					c.Lines = append(c.Lines, Series{Name: names[i] + suffix, X: l.X, Y: l.Y, Color: i + 1, Points: l.Points})
				case line2:
					c.Lines = append(c.Lines, Series{Name: names[i] + suffix2, X: l.X, Y: l.Y, Color: i + 1, Points: l.Points, Dashed: true})
				}
			}
		}
		return c
	}
	var out []Chart
	if steps {
		out = append(out, overlay(Chart{File: "latency-by-step.png", Title: "p99 latency by rate step (solid: publish, dashed: end-to-end)",
			XLabel: "intended rate (requests/s)", YLabel: "ms"}, "latency-by-step.png", "publish p99", "e2e p99", " publish", " e2e"))
	}
	return append(out,
		overlay(Chart{File: "latency-distribution.png", Title: "Latency by percentile (solid: publish, dashed: end-to-end)",
			XLabel: "percentile", YLabel: "ms", Percentile: true}, "latency-distribution.png", "publish", "end-to-end", " publish", " e2e"),
		overlay(Chart{File: "publish-latency.png", Title: "Publish latency p99", YLabel: "ms"}, "publish-latency.png", "p99", "", "", ""),
		overlay(Chart{File: "e2e-latency.png", Title: "End-to-end latency p99", YLabel: "ms"}, "e2e-latency.png", "p99", "", "", ""),
		overlay(Chart{File: "throughput.png", Title: "Delivered throughput", YLabel: "events/s"}, "throughput.png", "delivered", "", "", ""),
		overlay(Chart{File: "failures.png", Title: "Failed requests (solid) and lost events (dashed) per second", YLabel: "count"},
			"failures.png", "failed requests", "lost events", " failed", " lost"),
	)
}
