package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

// Compare renders two saved bench runs side by side into dir: summary.txt (a table of
// the headline figures, A vs B and the change) and index.html (the table, overlaid
// p99 and throughput charts, and both runs' own panels).
func Compare(dir string, a, b *Saved, nameA, nameB string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	head := []string{"metric", nameA, nameB, "B/A"}
	type row struct {
		name string
		a, b float64
		f    func(float64) string
	}
	dur := func(v float64) string { return round(time.Duration(v)).String() }
	num := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	pct := func(v float64) string { return fmt.Sprintf("%.3f%%", v) }
	rows := []row{
		{"send rate (req/s)", a.Load.Rate, b.Load.Rate, num},
		{"success", 100 * a.Load.Success, 100 * b.Load.Success, pct},
		{"publish p50", float64(a.Load.Latency.P50), float64(b.Load.Latency.P50), dur},
		{"publish p99", float64(a.Load.Latency.P99), float64(b.Load.Latency.P99), dur},
		{"publish p99.9", float64(a.Load.Latency.P999), float64(b.Load.Latency.P999), dur},
		{"e2e p50", float64(a.Receive.Latency.P50), float64(b.Receive.Latency.P50), dur},
		{"e2e p99", float64(a.Receive.Latency.P99), float64(b.Receive.Latency.P99), dur},
		{"e2e p99.9", float64(a.Receive.Latency.P999), float64(b.Receive.Latency.P999), dur},
		{"delivered events", float64(a.Delivered), float64(b.Delivered), num},
		{"lost events", float64(a.Lost), float64(b.Lost), num},
		{"duplicates", float64(a.Receive.Duplicates), float64(b.Receive.Duplicates), num},
	}
	var sum bytes.Buffer
	tw := tabwriter.NewWriter(&sum, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", head[0], head[1], head[2], head[3])
	var table [][]string
	for _, r := range rows {
		ratio := "-"
		if r.a != 0 {
			ratio = fmt.Sprintf("%.2f×", r.b/r.a)
		}
		cells := []string{r.name, r.f(r.a), r.f(r.b), ratio}
		table = append(table, cells)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cells[0], cells[1], cells[2], cells[3])
	}
	_ = tw.Flush()
	fmt.Fprintf(&sum, "\nA: %s (%s)\nB: %s (%s)\n", nameA, a.Load.Schedule, nameB, b.Load.Schedule)
	if err := os.WriteFile(filepath.Join(dir, SummaryFile), sum.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	ca, cb := Charts(a.Result), Charts(b.Result)
	var wide []image
	for i := range ca {
		if len(ca[i].Lines) == 0 {
			continue
		}
		// Overlay the most telling line of each chart: p99 for latency, the first otherwise.
		k := 0
		if len(ca[i].Lines) > 2 {
			k = 2
		}
		c := Chart{File: "compare-" + ca[i].File, Title: ca[i].Title + ": " + ca[i].Lines[k].Name, YLabel: ca[i].YLabel,
			Lines: []Series{{Name: nameA, Y: ca[i].Lines[k].Y}, {Name: nameB, Y: cb[i].Lines[k].Y}}}
		png, err := RenderPNG(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, c.File), png, 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		wide = append(wide, image{Title: c.Title, Src: dataURI(png)})
	}
	var panels []panel
	for _, x := range []struct {
		s    *Saved
		name string
	}{{a, nameA}, {b, nameB}} {
		var s bytes.Buffer
		if err := WriteSummary(&s, x.s); err != nil {
			return err
		}
		panels = append(panels, panel{Name: x.name, Summary: s.String(), Steps: x.s.Load.Steps, SLO: x.s.SLO})
	}
	return writeHTML(filepath.Join(dir, HTMLFile), htmlPage{
		Title: fmt.Sprintf("Sluice bench: %s vs %s", nameA, nameB), Head: head, Rows: table, Wide: wide, Panels: panels,
	})
}
