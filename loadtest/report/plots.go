package report

import (
	"bytes"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one line of a plot: y values at x = 0, 1, 2, … seconds.
type Series struct {
	Name string
	Y    []float64
}

// Chart is one plot: a title, a y-axis label and its lines.
type Chart struct {
	File   string // PNG file name in the report directory
	Title  string
	YLabel string
	Lines  []Series
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// RenderPNG draws c as a PNG of 7×3.2 inches at 72 dpi (small enough to embed).
func RenderPNG(c Chart) ([]byte, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = c.YLabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	for i, s := range c.Lines {
		pts := make(plotter.XYs, len(s.Y))
		for x, y := range s.Y {
			pts[x] = plotter.XY{X: float64(x), Y: y}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", c.Title, err)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	img := vgimg.NewWith(vgimg.UseWH(7*vg.Inch, 3.2*vg.Inch), vgimg.UseDPI(72))
	p.Draw(draw.New(img))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("plot %s: encode png: %w", c.Title, err)
	}
	return buf.Bytes(), nil
}
