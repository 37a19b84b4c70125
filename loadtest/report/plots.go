package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one line of a plot: y values at x = X[i], or at x = 0, 1, 2, … seconds
// when X is nil.
type Series struct {
	Name   string
	X      []float64 // nil: x = i
	Y      []float64
	Dashed bool // drawn dashed (e2e beside publish, or a second kind of line per run)
	Color  int  // index into the palette, +1 (0: the line's position in the chart)
	Points bool // mark each value (a few points, such as one per rate step)
}

// Chart is one plot: a title, axis labels and its lines. Every plotted value is
// non-negative: the y axis starts at 0, and a chart whose values are all 0 shows 0…1.
type Chart struct {
	File   string // PNG file name in the report directory
	Title  string
	XLabel string // default "time (s)"
	YLabel string
	Lines  []Series
	// Percentile says x is a percentile mapped to −log10(1 − q): ticks read 0%, 90%,
	// 99%, 99.9%, … as in HdrHistogram's percentile distribution plots.
	Percentile bool
	Marks      []Mark // vertical lines with a label (faults)
	Spans      []Span // shaded stretches with a label (a backlog and its drain)
}

// Mark is a vertical line at x = X, labelled at the top of the plot.
type Mark struct {
	X     float64
	Label string
}

// Span is a shaded stretch of x from From to To, labelled at the top of the plot.
type Span struct {
	From, To float64
	Label    string
	Color    int // index into the palette, +1
}

// markColor is the color fault marks are drawn in.
func markColor() color.RGBA { return color.RGBA{R: 0xc6, G: 0x28, B: 0x28, A: 0xff} }

// markPlotter draws a Mark; its data range keeps X in view. Row staggers the labels
// of several marks.
type markPlotter struct {
	Mark
	row int
}

// Plot implements plot.Plotter.
func (m markPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(m.X)
	c.StrokeLine2(draw.LineStyle{Color: markColor(), Width: vg.Points(1.2), Dashes: []vg.Length{vg.Points(4), vg.Points(2)}}, x, c.Min.Y, x, c.Max.Y)
	sty := p.X.Tick.Label
	sty.Color = markColor()
	sty.Font.Size = vg.Points(9)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
	c.FillText(sty, vg.Point{X: x + vg.Points(3), Y: c.Max.Y - vg.Points(float64(11+11*(m.row%4)))}, m.Label)
}

// DataRange implements plot.DataRanger.
func (m markPlotter) DataRange() (xmin, xmax, ymin, ymax float64) { return m.X, m.X, 0, 0 }

// spanPlotter draws a Span.
type spanPlotter struct{ Span }

// Plot implements plot.Plotter.
func (s spanPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := trX(s.From), trX(s.To)
	r, g, b, _ := palette[max(s.Color-1, 0)%len(palette)].RGBA()
	fill := color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x30}
	c.FillPolygon(fill, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
	sty := p.X.Tick.Label
	sty.Font.Size = vg.Points(9)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
	c.FillText(sty, vg.Point{X: x0 + vg.Points(3), Y: c.Min.Y + vg.Points(4)}, s.Label)
}

// DataRange implements plot.DataRanger.
func (s spanPlotter) DataRange() (xmin, xmax, ymin, ymax float64) { return s.From, s.To, 0, 0 }

// palette is Tableau's ten colours: the lines of a chart, or the runs of a comparison.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
}

// Plot size: drawn at 144 dpi so that the page, which shows a plot about half a laptop
// screen wide, stays sharp on high-density screens.
const (
	plotW   = 6.4 * vg.Inch
	plotH   = 3.8 * vg.Inch
	plotDPI = 144
)

// plainTicks are gonum's default ticks, labelled without trailing zeros (250, not
// 250.00), and every tick labelled when gonum would label fewer than three.
type plainTicks struct{}

// Ticks returns the default ticks with plain labels.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	labelled := 0
	for _, t := range ts {
		if t.Label != "" {
			labelled++
		}
	}
	for i, t := range ts {
		if t.Label != "" || labelled < 3 { // fewer than 3 labels: label the minor ticks too
			ts[i].Label = strconv.FormatFloat(math.Round(t.Value*1e6)/1e6, 'f', -1, 64)
		}
	}
	return ts
}

// percentileTicks labels a −log10(1 − q) axis with the percentiles 0%, 90%, 99%, ….
type percentileTicks struct{}

// Ticks returns a major tick at every whole number of nines in [lo, hi].
func (percentileTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for n := math.Max(0, math.Ceil(lo)); n <= hi; n++ {
		ts = append(ts, plot.Tick{Value: n, Label: percentileLabel(n)})
	}
	return ts
}

// percentileLabel names the percentile q with −log10(1 − q) = nines: 0 → "0%", 2 → "99%".
func percentileLabel(nines float64) string {
	q := 100 * (1 - math.Pow(10, -nines))
	return strconv.FormatFloat(q, 'f', max(0, int(nines)-2), 64) + "%"
}

// newPlot lays c out; RenderPNG draws it.
func newPlot(c Chart) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.TextStyle.Font.Variant = "Sans"
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = c.XLabel
	if p.X.Label.Text == "" {
		p.X.Label.Text = "time (s)"
	}
	p.Y.Label.Text = c.YLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(11)
		a.Label.TextStyle.Font.Variant = "Sans"
		a.Tick.Label.Font.Size = vg.Points(10)
		a.Tick.Label.Font.Variant = "Sans"
	}
	if c.Percentile {
		p.X.Tick.Marker = percentileTicks{}
	}
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 0xe4}
	g.Horizontal.Color = color.Gray{Y: 0xe4}
	p.Add(g)
	for _, s := range c.Spans {
		p.Add(spanPlotter{s})
	}
	p.Y.Tick.Marker = plainTicks{}
	if !c.Percentile {
		p.X.Tick.Marker = plainTicks{}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.TextStyle.Font.Variant = "Sans"
	p.Legend.Padding = vg.Points(2)
	for i, s := range c.Lines {
		pts := make(plotter.XYs, len(s.Y))
		for k, y := range s.Y {
			x := float64(k)
			if s.X != nil {
				x = s.X[k]
			}
			pts[k] = plotter.XY{X: x, Y: y}
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %s: %w", c.Title, s.Name, err)
		}
		col := palette[i%len(palette)]
		if s.Color > 0 {
			col = palette[(s.Color-1)%len(palette)]
		}
		l.Color = col
		l.Width = vg.Points(1.8)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(l)
		if s.Points {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return nil, fmt.Errorf("plot %s: %s: %w", c.Title, s.Name, err)
			}
			sc.Color = col
			sc.Shape = draw.CircleGlyph{}
			sc.Radius = vg.Points(2.5)
			p.Add(sc)
			p.Legend.Add(s.Name, l, sc)
		} else {
			p.Legend.Add(s.Name, l)
		}
	}
	for i, m := range c.Marks {
		p.Add(markPlotter{Mark: m, row: i})
	}
	// Every value plotted is a count, a rate or a latency: the y axis starts at 0, and
	// a flat 0 shows 0…1 (gonum would widen an empty range to −1…1).
	p.Y.Min = 0
	if p.Y.Max > 0 {
		p.Y.Max *= 1.05
	} else {
		p.Y.Max = 1
	}
	if c.Percentile || c.XLabel == "" { // percentiles and seconds count from 0
		p.X.Min = 0
	}
	if !(p.X.Max > p.X.Min) {
		p.X.Max = p.X.Min + 1
	}
	return p, nil
}

// RenderPNG draws c, its legend at the right, as a 6.4×3.8 inch PNG at 144 dpi.
func RenderPNG(c Chart) ([]byte, error) {
	p, err := newPlot(c)
	if err != nil {
		return nil, err
	}
	img := vgimg.NewWith(vgimg.UseWH(plotW, plotH), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	// The title spans the image; the legend goes right of the plot, level with the top
	// of the data, so that it never hides a line.
	title := p.Title
	p.Title.Text = ""
	top := title.TextStyle.Rectangle(title.Text).Size().Y + title.Padding
	dc.FillText(title.TextStyle, vg.Point{X: dc.Center().X, Y: dc.Max.Y + title.TextStyle.FontExtents().Descent}, title.Text)
	leg := p.Legend
	p.Legend = plot.NewLegend()
	w := leg.Rectangle(dc).Size().X
	if len(c.Lines) > 0 {
		w += vg.Points(12)
	}
	p.Draw(draw.Crop(dc, 0, -w, 0, -top))
	leg.Draw(draw.Crop(dc, plotW-w+vg.Points(8), 0, 0, -top))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("plot %s: encode png: %w", c.Title, err)
	}
	return buf.Bytes(), nil
}
