package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// startProc runs the sluice binary with args until the test ends (SIGTERM, then kill).
func startProc(t *testing.T, args ...string) (*exec.Cmd, *syncbuf.Buffer, chan error) {
	t.Helper()
	cmd := exec.Command(sluiceBin, args...)
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("sluice %s:\n%s", strings.Join(args, " "), out.String())
		}
	})
	return cmd, &out, exited
}

// runSluice runs the binary to completion within a generous bound.
func runSluice(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, sluiceBin, args...).CombinedOutput()
	return string(out), err
}

// TestDistributedLoad: three `sluice load --agent` processes share one schedule (300/s
// for 5 s) sent to a memory broker whose two triggers deliver every event to two
// `sluice receive` processes; `sluice receive --merge` combines their reports. The
// test asserts on counts only: every scheduled request sent and accepted, every event
// received (by both receivers: once plus one duplicate), none lost; and an agent
// address that refuses makes the controller exit non-zero naming it (that run goes to a
// third receiver, whose report the merge also reads).
func TestDistributedLoad(t *testing.T) {
	dir := t.TempDir()
	// recv[0] and recv[1] get the broker's deliveries; recv[2] gets the failing run's
	// events straight from the agents: a receiver counts its quiet periods from its first
	// event, so one fed by that run as well could stop before the main run's events came.
	recv := []string{freePort(t), freePort(t), freePort(t)}
	files := []string{filepath.Join(dir, "r1.json"), filepath.Join(dir, "r2.json"), filepath.Join(dir, "r3.json")}
	var recvExit []chan error
	for i, addr := range recv {
		_, _, ex := startProc(t, "receive", "--addr", addr, "--quiet-periods", "3", "--period", "2s", "-o", files[i])
		recvExit = append(recvExit, ex)
	}
	cfg := brokerYAML("{retry: 20, backoffPolicy: linear, backoffDelay: PT0.2S}",
		[3]string{"one", "", "http://" + recv[0] + "/"}, [3]string{"two", "", "http://" + recv[1] + "/"})
	b := startBroker(t, "--config", writeConfig(t, cfg))

	var agents []string
	for range 3 {
		addr := freePort(t)
		startProc(t, "load", "--agent", "--listen", addr)
		agents = append(agents, addr)
	}
	for _, a := range agents {
		waitHTTP(t, "http://"+a+"/time")
	}
	refused := freePort(t) // nothing listens there

	// An agent that refuses: the other two run their shares, the controller names it.
	out, err := runSluice(t, "load", "--agents", strings.Join([]string{agents[0], agents[1], refused}, ","),
		"--target", "http://"+recv[2]+"/", "--rate", "300", "--duration", "2s", "--connections", "8", "--run", "e2e-fail", "--quiet")
	if err == nil || !strings.Contains(out, refused) || !strings.Contains(out, "1 of 3 agents failed") {
		t.Fatalf("controller with a refusing agent: err %v, output:\n%s", err, out)
	}

	resFile := filepath.Join(dir, "load.json")
	out, err = runSluice(t, "load", "--agents", strings.Join(agents, ","), "--target", b.base+"/default/default",
		"--rate", "300", "--duration", "5s", "--connections", "8", "--run", "e2e-agents", "--quiet", "-o", resFile)
	if err != nil {
		t.Fatalf("controller: %v\n%s", err, out)
	}
	var res struct {
		Requests uint64            `json:"requests"`
		OK       uint64            `json:"ok"`
		Codes    map[string]uint64 `json:"status_codes"`
		Latency  struct {
			Count uint64 `json:"count"`
		} `json:"latency"`
		Seconds []struct {
			Intended uint64 `json:"intended"`
		} `json:"seconds"`
		Agents []struct {
			Addr     string `json:"addr"`
			Requests uint64 `json:"requests"`
			Error    string `json:"error"`
		} `json:"agents"`
	}
	raw, err := os.ReadFile(resFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	var intended uint64
	for _, s := range res.Seconds {
		intended += s.Intended
	}
	if res.Requests != 1500 || res.OK != 1500 || res.Latency.Count != 1500 || intended != 1500 || len(res.Agents) != 3 {
		t.Fatalf("merged result: requests %d ok %d latency count %d intended %d agents %d, want 1500 ×4 and 3; codes %v",
			res.Requests, res.OK, res.Latency.Count, intended, len(res.Agents), res.Codes)
	}
	for _, a := range res.Agents {
		if a.Requests != 500 || a.Error != "" {
			t.Errorf("agent %s: %d requests, error %q; want 500, none", a.Addr, a.Requests, a.Error)
		}
	}

	for i, ex := range recvExit {
		select {
		case err := <-ex:
			if err != nil {
				t.Fatalf("receiver %d: %v", i, err)
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("receiver %d did not stop after its quiet periods", i)
		}
	}
	merged := filepath.Join(dir, "merged.json")
	if out, err := runSluice(t, "receive", "--merge", strings.Join(files, ","), "-o", merged); err != nil {
		t.Fatalf("receive --merge: %v\n%s", err, out)
	}
	var m struct {
		Runs []struct {
			Run        string `json:"run_id"`
			Received   uint64 `json:"received"`
			HighestSeq uint64 `json:"highest_seq"`
			Lost       uint64 `json:"lost"`
			Duplicates uint64 `json:"duplicates"`
		} `json:"runs"`
	}
	if raw, err = os.ReadFile(merged); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for i, r := range m.Runs {
		runs[r.Run] = i
	}
	i, ok := runs["e2e-agents"]
	if !ok {
		t.Fatalf("merged report has no run e2e-agents: %s", raw)
	}
	if r := m.Runs[i]; r.Received != 1500 || r.HighestSeq != 1499 || r.Lost != 0 || r.Duplicates < 1500 {
		t.Errorf("run e2e-agents across receivers: %+v; want 1500 received, highest 1499, 0 lost, ≥1500 duplicates (each receiver sees every event)", r)
	}
	// The failed run: only the two live agents' shares (hits n mod 3 ∈ {0, 1}) arrived.
	if i, ok := runs["e2e-fail"]; !ok || m.Runs[i].Received != 400 || m.Runs[i].Duplicates != 0 {
		t.Errorf("run e2e-fail: %+v, want 400 received, no duplicates", m.Runs)
	}
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
