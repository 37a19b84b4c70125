package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-broker/sluice/loadtest/agent"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// TestDistributedHistogramIsTheUnion: three `sluice load --agent` processes share one
// schedule (300/s for 3 s) into a `sluice receive` process; the controller's merged
// report gives the latency and dispatch-lag figures of the union of the three agents'
// histograms, as each agent reports them on GET /result: the histograms summed bucket
// by bucket and summarized. Counts and figures are compared, never a rate or a latency
// bound.
func TestDistributedHistogramIsTheUnion(t *testing.T) {
	dir := t.TempDir()
	recv := freePort(t)
	startProc(t, "receive", "--addr", recv)
	waitHTTP(t, "http://"+recv+"/metrics")
	var agents []string
	for range 3 {
		addr := freePort(t)
		startProc(t, "load", "--agent", "--listen", addr)
		agents = append(agents, addr)
	}
	for _, a := range agents {
		waitHTTP(t, "http://"+a+"/time")
	}
	resFile := filepath.Join(dir, "load.json")
	out, err := runSluice(t, "load", "--agents", strings.Join(agents, ","), "--target", "http://"+recv+"/",
		"--rate", "300", "--duration", "3s", "--connections", "8", "--run", "e2e-union", "--quiet", "-o", resFile)
	if err != nil && !strings.Contains(out, "fell behind") { // a loaded machine may slow an agent: a rate, not judged here
		t.Fatalf("controller: %v\n%s", err, out)
	}
	var merged struct {
		Requests uint64        `json:"requests"`
		Latency  stats.Summary `json:"latency"`
		Lag      stats.Summary `json:"dispatch"`
	}
	raw, err := os.ReadFile(resFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &merged); err != nil {
		t.Fatal(err)
	}

	union, lagUnion := stats.NewHist(), stats.NewHist()
	var parts uint64
	for _, a := range agents {
		resp, err := http.Get("http://" + a + "/result")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s/result: %d %v: %s", a, resp.StatusCode, err, body)
		}
		var r agent.Result
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		for _, x := range []struct {
			into    *hdrhistogram.Histogram
			encoded string
		}{{union, r.HistEncoded}, {lagUnion, r.LagHistEncoded}} {
			h, err := hdrhistogram.Decode([]byte(x.encoded))
			if err != nil {
				t.Fatalf("agent %s: %v", a, err)
			}
			if dropped := x.into.Merge(h); dropped != 0 {
				t.Fatalf("agent %s: %d values out of range", a, dropped)
			}
		}
		if r.Requests != 300 {
			t.Errorf("agent %s: %d requests, want 300 (its third of 900)", a, r.Requests)
		}
		parts += r.Requests
	}
	if merged.Requests != 900 || parts != 900 || merged.Latency.Count != 900 || merged.Lag.Count != 900 {
		t.Fatalf("merged: %d requests, %d latencies, %d lags; agents %d requests; want 900 each", merged.Requests, merged.Latency.Count, merged.Lag.Count, parts)
	}
	if got, want := merged.Latency, stats.Summarize(union); got != want {
		t.Errorf("merged latency %+v, want the union's %+v", got, want)
	}
	if got, want := merged.Lag, stats.Summarize(lagUnion); got != want {
		t.Errorf("merged dispatch lag %+v, want the union's %+v", got, want)
	}
}
