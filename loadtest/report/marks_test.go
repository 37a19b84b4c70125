package report

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// markPixels counts the pixels of a PNG drawn in the fault marks' colour.
func markPixels(t *testing.T, b []byte) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == 0xc6 && g>>8 == 0x28 && bl>>8 == 0x28 {
				n++
			}
		}
	}
	return n
}

// TestMarksAreDrawn: a fault mark puts its colour on the plot, a chart without one has
// none of it; a span widens the x axis to hold it.
func TestMarksAreDrawn(t *testing.T) {
	c := Chart{File: "x.png", Title: "t", YLabel: "n", Lines: []Series{{Name: "a", Y: []float64{1, 2, 3}}}}
	plain, err := RenderPNG(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Marks = []Mark{{X: 1.5, Label: "fault 1 at 1.5s"}}
	c.Spans = []Span{{From: 0, To: 6, Label: "draining", Color: 3}}
	marked, err := RenderPNG(c)
	if err != nil {
		t.Fatal(err)
	}
	if n := markPixels(t, plain); n != 0 {
		t.Errorf("plain chart: %d pixels of the mark colour, want 0", n)
	}
	if n := markPixels(t, marked); n < 100 {
		t.Errorf("marked chart: %d pixels of the mark colour, want a line's worth (100+)", n)
	}
	p, err := newPlot(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.X.Max < 6 {
		t.Errorf("x axis ends at %g, want the span's end 6 in view", p.X.Max)
	}
}

// TestBacklogAndFaultsInReport: the charts over time carry the fault's mark, the
// throughput chart the backlog's spans, and the summary names both.
func TestBacklogAndFaultsInReport(t *testing.T) {
	zero := time.Duration(0)
	r := &bench.Result{
		Load:    &load.Result{Seconds: []stats.LoadSecond{{T: 0, OK: 10}, {T: 1, OK: 10}}},
		Receive: &receive.Report{Seconds: []stats.RecvSecond{{T: 0}, {T: 1}, {T: 2, Events: 20}}},
		Backlog: &bench.Backlog{Requested: 20, Events: 20, OpenedAt: 2 * time.Second, Drained: true,
			DrainTime: 500 * time.Millisecond, CatchUpEvents: 20, CatchUpRate: 40, PeakCatchUp: 20},
		Faults: []bench.FaultRecord{
			{Fault: bench.Fault{At: time.Second, Command: "touch m"}, Ran: true, IngressRecovery: &zero, OutputTail: "done\n"},
			{Fault: bench.Fault{At: time.Hour, Command: "true"}, ExitCode: -1, Error: "not run: the run ended first"},
		},
	}
	s := &Saved{Result: r}
	for _, c := range Charts(s) {
		timePlot := c.XLabel == ""
		if got := len(c.Marks); (got == 1) != timePlot || (got == 1 && c.Marks[0].Label != "fault 1 at 1s") {
			t.Errorf("%s: marks %+v (time plot %v)", c.File, c.Marks, timePlot)
		}
		if got := len(c.Spans); (got == 2) != (c.File == "throughput.png") {
			t.Errorf("%s: spans %+v", c.File, c.Spans)
		}
	}
	var b strings.Builder
	if err := WriteSummary(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"== Backlog", "20, 20, 0", "Drain         [time to drain, drained]                         500ms, true",
		"40.00/s", "fault 1 at 1s: touch m", "exit 0", "ingress 2xx again after 0s, backlog drained after never",
		"    done", "fault 2 at 1h0m0s: true\n  not run",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}
