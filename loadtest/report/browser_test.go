package report

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/slo"
)

// chromium finds Debian's chromium (or another Chrome). Under CI=true a missing browser
// fails the test (make test installs it with apt); elsewhere the test skips, saying why.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium on PATH (Debian: apt-get install -y chromium; make test installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

// saveScreenshot writes png into the test's artifact directory (kept with go test
// -artifacts) and, when SLUICE_SCREENSHOTS names a directory, there too (make
// screenshots refreshes docs/images that way).
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("SLUICE_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
}

// pageLayout is what the browser reports about a report page.
type pageLayout struct {
	Images  []struct{ Complete, Natural, Shown float64 }
	Columns int     // distinct left edges of the plots
	PlotW   float64 // width of the first plot, CSS px
}

const layoutJS = `(() => {
	const figs = Array.from(document.querySelectorAll('.plots figure')).map(f => f.getBoundingClientRect());
	return {
		Images: Array.from(document.images).map(i => ({Complete: i.complete ? 1 : 0, Natural: i.naturalWidth, Shown: i.getBoundingClientRect().width})),
		Columns: new Set(figs.map(r => Math.round(r.left))).size,
		PlotW: figs.length ? figs[0].width : 0,
	};
})()`

// TestReportInChromium runs a direct bench up a six-step ramp (250 → 2000 requests/s,
// 2 s a step), writes its report and a comparison of three runs, and opens both pages
// in headless Chromium at 1280×900: no console error, every plot loaded and drawn, the
// plots in two columns. The screenshot of the report is docs/images/bench-report.png.
func TestReportInChromium(t *testing.T) {
	browser := chromium(t)
	if testing.Short() {
		t.Skip("-short: the browser test takes about 30 s")
	}
	tm, err := cevent.NewTemplate(cevent.Binary, cevent.DefaultType, cevent.DefaultSource, "browser", bytes.Repeat([]byte("x"), 1024), 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bench.Run(context.Background(), bench.Options{
		Load: load.Options{Pacer: pacer.LogRamp{From: 250, To: 2000, StepDuration: 2 * time.Second, Count: 6},
			Template: tm, Connections: 64},
		ReceiverAddr: "127.0.0.1:0", Direct: true, Settle: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := slo.Parse("loss=0,success>=99")
	if err != nil {
		t.Fatal(err)
	}
	v, pass := slo.Check(objs, res.Metrics())
	s := &Saved{Result: res, SLO: v, SLOPass: &pass, Label: "direct baseline", Finished: time.Now()}
	dir := filepath.Join(t.TempDir(), "report")
	if err := WriteDir(dir, s); err != nil {
		t.Fatal(err)
	}
	cmp := filepath.Join(t.TempDir(), "compare")
	if err := Compare(cmp, []*Saved{s, s, s}, []string{"one", "two", "three"}); err != nil {
		t.Fatal(err)
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true))...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelTimeout()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil { // opens the tab, so the console misses nothing
		t.Fatal(err)
	}
	// The console's messages, up to the marker the test logs when it is done.
	const marker = "report test done"
	msgs := chromedp.Console(ctx)
	errs := make(chan []string, 1)
	go func() {
		var e []string
		for m, err := range msgs {
			if err != nil || strings.Contains(m.String(), marker) {
				break
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				e = append(e, m.String())
			}
		}
		errs <- e
	}()

	for _, page := range []struct {
		name, dir string
		plots     int
	}{{"report", dir, len(Charts(s))}, {"comparison", cmp, len(compareCharts([]*Saved{s, s, s}, []string{"one", "two", "three"}))}} {
		if err := chromedp.Do(ctx, chromedp.Navigate("file://"+filepath.Join(page.dir, HTMLFile))); err != nil {
			t.Fatal(err)
		}
		l, err := chromedp.Run(ctx, chromedp.Evaluate[pageLayout](layoutJS))
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Images) != page.plots {
			t.Errorf("%s: %d images, want %d plots", page.name, len(l.Images), page.plots)
		}
		for i, im := range l.Images {
			if im.Complete != 1 || im.Natural == 0 || im.Shown < 300 {
				t.Errorf("%s: plot %d not loaded or too small: %+v", page.name, i, im)
			}
		}
		if l.Columns != 2 || l.PlotW < 540 {
			t.Errorf("%s at 1280 px: plots in %d columns, %.0f px wide; want 2 columns of at least 540 px", page.name, l.Columns, l.PlotW)
		}
		if page.name == "report" {
			shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			saveScreenshot(t, "bench-report.png", shot)
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`console.log("`+marker+`"), 1`)); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-errs:
		if len(e) > 0 {
			t.Errorf("the pages logged errors: %q", e)
		}
	case <-time.After(30 * time.Second):
		t.Error("the console's marker never arrived")
	}
}
