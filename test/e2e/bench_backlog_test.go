package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// runBench runs `sluice bench` with args, --quiet and --out DIR, within a generous
// bound, and returns DIR and stdout.
func runBench(t *testing.T, args ...string) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, append(append([]string{"bench"}, args...), "--quiet", "--out", out)...)
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice bench %s: %v (context: %v)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, ctx.Err(), stdout.String(), stderr.String())
	}
	return out, stdout.String()
}

// readResults decodes a report directory's results.json into v.
func readResults(t *testing.T, dir string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

// TestBenchBacklogDrains: a memory broker whose trigger delivers to bench's receiver
// takes 2,000 events (500/s for 4 s) while the receiver refuses them, retries them, and
// delivers every one once the receiver opens. The test asserts on counts: every event
// accepted, refused at least once, delivered, none lost; the drain figures present and
// positive (never their size: the machine is shared).
func TestBenchBacklogDrains(t *testing.T) {
	recvAddr := freePort(t)
	cfg := brokerYAML("{retry: 100, backoffPolicy: linear, backoffDelay: PT0.1S}", [3]string{"all", "", "http://" + recvAddr + "/"})
	b := startBroker(t, "--config", writeConfig(t, cfg))

	out, stdout := runBench(t, "--target", b.base+"/default/default", "--receiver-addr", recvAddr,
		"--backlog", "2000", "--rate", "500", "--connections", "16", "--settle", "20s")
	var res struct {
		Accepted  uint64 `json:"accepted"`
		Delivered uint64 `json:"delivered"`
		Lost      uint64 `json:"lost"`
		Backlog   *struct {
			Requested uint64  `json:"requested_events"`
			Events    uint64  `json:"backlog_events"`
			Refused   uint64  `json:"refused_requests"`
			OpenedAt  int64   `json:"receiver_opened_at_ns"`
			Drained   bool    `json:"drained"`
			DrainTime int64   `json:"drain_time_ns"`
			CatchUp   uint64  `json:"catch_up_events"`
			Rate      float64 `json:"catch_up_events_per_second"`
			Peak      uint64  `json:"catch_up_peak_events_per_second"`
		} `json:"backlog"`
	}
	readResults(t, out, &res)
	bl := res.Backlog
	if bl == nil {
		t.Fatalf("results.json has no backlog\n%s", stdout)
	}
	if res.Accepted != 2000 || res.Delivered != 2000 || res.Lost != 0 {
		t.Errorf("accepted %d, delivered %d, lost %d; want 2000, 2000, 0", res.Accepted, res.Delivered, res.Lost)
	}
	if bl.Requested != 2000 || bl.Events != 2000 || bl.Refused == 0 || !bl.Drained || bl.CatchUp != 2000 {
		t.Errorf("backlog: requested %d, events %d, refused %d, drained %v, caught up %d; want 2000, 2000, >0, true, 2000",
			bl.Requested, bl.Events, bl.Refused, bl.Drained, bl.CatchUp)
	}
	if bl.OpenedAt <= 0 || bl.DrainTime <= 0 || bl.Rate <= 0 || bl.Peak == 0 {
		t.Errorf("backlog: opened at %d ns, drain %d ns, catch-up %g/s, peak %d; want all positive", bl.OpenedAt, bl.DrainTime, bl.Rate, bl.Peak)
	}
	sum, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`== Backlog[^\n]*\nBacklog +\[requested, accepted, refused requests\] +2000, 2000, [1-9][0-9]*\n` +
		`(.*\n){1}Drain +\[time to drain, drained\] +[0-9.]+m?s, true\nCatch-up +\[events, rate, peak second\] +2000, [0-9.]+/s, [1-9]`).Match(sum) {
		t.Errorf("summary.txt lacks the backlog's figures:\n%s", sum)
	}
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "Throughput: sent and delivered; receiver refusing from 0s to ") || !strings.Contains(string(page), "; draining from ") {
		t.Error("index.html: the throughput plot does not mark the refusal and the drain")
	}
}

// TestBenchFaultRuns: a --fault command runs at its time in a direct run, writes its
// marker, and its record (exit code 0, output) is in results.json, its mark on the
// page's plots and its line in the summary.
func TestBenchFaultRuns(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "fault-ran")
	out, stdout := runBench(t, "--direct", "--receiver-addr", "127.0.0.1:0", "--rate", "200", "--duration", "3s",
		"--connections", "8", "--fault", fmt.Sprintf("at=1s,run=echo hit > %s; echo done, ok", marker))
	if b, err := os.ReadFile(marker); err != nil || string(b) != "hit\n" {
		t.Errorf("marker: %q, %v; want the fault's output", b, err)
	}
	var res struct {
		Lost   uint64 `json:"lost"`
		Faults []struct {
			At       int64  `json:"at_ns"`
			Command  string `json:"command"`
			Ran      bool   `json:"ran"`
			ExitCode int    `json:"exit_code"`
			Tail     string `json:"output_tail"`
			Ingress  *int64 `json:"ingress_recovery_ns"`
			Lost     uint64 `json:"lost"`
		} `json:"faults"`
	}
	readResults(t, out, &res)
	if len(res.Faults) != 1 {
		t.Fatalf("results.json: %d faults, want 1\n%s", len(res.Faults), stdout)
	}
	f := res.Faults[0]
	if f.At != int64(time.Second) || !f.Ran || f.ExitCode != 0 || f.Tail != "done, ok\n" || !strings.HasPrefix(f.Command, "echo hit > ") {
		t.Errorf("fault record %+v; want at 1s, ran, exit 0, output %q", f, "done, ok\n")
	}
	if res.Lost != 0 || f.Lost != 0 || f.Ingress == nil || *f.Ingress != 0 {
		t.Errorf("lost %d, by the fault %d, ingress recovery %v; want 0, 0, 0 (nothing failed)", res.Lost, f.Lost, f.Ingress)
	}
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "; fault 1 at 1s\""); n != 4 {
		t.Errorf("index.html: %d plots carry the mark \"fault 1 at 1s\", want the 4 plots over time", n)
	}
	if !strings.Contains(stdout, "fault 1 at 1s: echo hit > ") || !strings.Contains(stdout, "exit 0 after ") {
		t.Errorf("summary lacks the fault:\n%s", stdout)
	}
}
