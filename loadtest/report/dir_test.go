package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/slo"
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
	for _, c := range Charts(s.Result) {
		files = append(files, c.File)
	}
	if len(files) != 10 {
		t.Errorf("%d files, want 4 + 6 plots", len(files))
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	html, _ := os.ReadFile(filepath.Join(dir, HTMLFile))
	if n := bytes.Count(html, []byte(`src="data:image/png;base64,`)); n != 6 {
		t.Errorf("index.html embeds %d plots, want 6", n)
	}
	if bytes.Contains(html, []byte("http://")) && bytes.Contains(html, []byte("<script src")) || bytes.Contains(html, []byte("<link ")) {
		t.Errorf("index.html refers to external resources")
	}
	back, err := Load(dir)
	if err != nil || back.Accepted != s.Accepted || len(back.Load.Steps) != 2 {
		t.Fatalf("Load = %+v, %v", back, err)
	}
	cmp := t.TempDir()
	if err := Compare(cmp, back, back, "a", "b"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SummaryFile, HTMLFile} {
		if st, err := os.Stat(filepath.Join(cmp, f)); err != nil || st.Size() == 0 {
			t.Errorf("compare %s missing or empty: %v", f, err)
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
