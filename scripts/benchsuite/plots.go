package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// rampPlots writes ramp-throughput.png (achieved send and delivery rate against the
// intended rate) and ramp-latency.png (p99 publish and end-to-end latency against the
// intended rate) into dir and returns their names.
func rampPlots(dir string, s *scenarioResult) ([]string, error) {
	if len(s.Steps) == 0 {
		return nil, nil
	}
	steps := append([]stepResult(nil), s.Steps...)
	sortByRate(steps)
	matching := max(s.Matching, 1)
	xy := func(f func(st stepResult) float64) plotter.XYs {
		pts := make(plotter.XYs, len(steps))
		for i, st := range steps {
			pts[i] = plotter.XY{X: st.IntendedRate, Y: f(st)}
		}
		return pts
	}
	type line struct {
		name string
		pts  plotter.XYs
	}
	charts := []struct {
		file, title, y string
		lines          []line
	}{
		{"ramp-throughput.png", s.Title + ": ramp throughput", "events/s", []line{
			{"intended", xy(func(st stepResult) float64 { return st.IntendedRate })},
			{"sent", xy(func(st stepResult) float64 { return st.Rate })},
			{"delivered / triggers", xy(func(st stepResult) float64 {
				return float64(st.Deliveries) / float64(matching) / max(st.DurationS+st.WarmupS, 1e-9)
			})},
		}},
		{"ramp-latency.png", s.Title + ": ramp p99 latency", "ms (log)", []line{
			{"publish p99", xy(func(st stepResult) float64 { return max(st.Publish.P99, 0.01) })},
			{"e2e p99", xy(func(st stepResult) float64 { return max(st.E2E.P99, 0.01) })},
		}},
	}
	var names []string
	for _, c := range charts {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "intended rate (events/s)"
		p.Y.Label.Text = c.y
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		if c.file == "ramp-latency.png" {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		} else {
			p.Y.Min = 0
		}
		for i, l := range c.lines {
			ln, pts, err := plotter.NewLinePoints(l.pts)
			if err != nil {
				return nil, fmt.Errorf("plot %s: %w", c.file, err)
			}
			ln.Color = palette[i%len(palette)]
			pts.Color = palette[i%len(palette)]
			ln.Width = vg.Points(1.5)
			p.Add(ln, pts)
			p.Legend.Add(l.name, ln, pts)
		}
		w, err := p.WriterTo(7*vg.Inch, 3.2*vg.Inch, "png")
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", c.file, err)
		}
		f, err := os.Create(filepath.Join(dir, c.file))
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", c.file, err)
		}
		_, werr := w.WriteTo(f)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("plot %s: %w", c.file, werr)
		}
		names = append(names, c.file)
	}
	return names, nil
}

// palette colours the lines of a plot (matplotlib's first four).
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// sortByRate orders steps by intended rate.
func sortByRate(steps []stepResult) {
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].IntendedRate < steps[j].IntendedRate })
}
