package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// TestFindMaxLandsOnTheBrokersRateLimit runs `sluice bench --find-max` against a broker
// whose capacity is set by its sluice.dev/max-rate annotation (400 events/s: ingress
// answers 429 above it), not by the machine, and asserts the maximum it finds is within
// 10% of it. The objectives count answers and losses (success>=99,loss=0), so the
// machine's load cannot decide them: a rate above the limit gets 429s at any speed. The
// rates stay low (at most 600/s) so that a loaded machine's generator still sends them
// (a step the generator falls short of stops the search undecided).
//
// Each step lasts 10 s because the limiter is a token bucket holding one second of its
// rate: a step of D seconds starting with a full bucket is answered 2xx at up to
// (1 + 1/D) times the limit, so shorter steps would find a higher "max". With 10 s steps
// and a start of 300/s the search tries 300 and 375/s, which pass, 600 and 450/s, which
// fail, whether or not the bucket refilled between steps, then 413/s, which may go
// either way, and 394/s if it failed: the result is 413 or 394, both within 10%. At most
// 7 steps (--max-steps) of 10 s bound the run.
func TestFindMaxLandsOnTheBrokersRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 50-70 s search")
	}
	const limit = 400
	recvAddr := freePort(t)
	cfg := fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: default, annotations: {sluice.dev/max-rate: "%d"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: all, namespace: default}
spec:
  broker: default
  subscriber: {uri: "http://%s/"}
`, limit, recvAddr)
	b := startBroker(t, "--config", writeConfig(t, cfg))

	out := filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 110*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sluiceBin, "bench", "--target", b.base+"/default/default",
		"--receiver-addr", recvAddr, "--find-max", "--slo", "success>=99,loss=0",
		"--duration", "10s", "--start-rate", "300", "--precision", "10", "--max-steps", "7",
		"--settle", "20s", "--quiet", "--out", out)
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("sluice bench --find-max:\n%s", tail(stdout.String(), 14))
	if err != nil {
		t.Fatalf("sluice bench --find-max: %v (context: %v)\nstderr:\n%s", err, ctx.Err(), stderr.String())
	}

	if strings.Contains(stdout.String(), "the generator could not send") {
		t.Fatalf("the search stopped undecided: this machine's generator fell short of a rate of at most %d events/s", limit*3/2)
	}
	m := regexp.MustCompile(`(?m)^max sustainable: (\d+) events/s$`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no 'max sustainable: N events/s' line in the output")
	}
	found, _ := strconv.Atoi(m[1])
	if found < limit*9/10 || found > limit*11/10 {
		t.Errorf("max sustainable %d events/s, want within 10%% of the broker's max-rate %d", found, limit)
	}

	// results.json holds the same search: every step, its verdict and what failed.
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		FindMax *struct {
			MaxEvents float64 `json:"max_events_per_second"`
			Converged bool    `json:"converged"`
			Steps     []struct {
				Events float64  `json:"events_per_second"`
				Pass   bool     `json:"pass"`
				Failed []string `json:"failed"`
			} `json:"steps"`
		} `json:"find_max"`
	}
	if err := json.Unmarshal(raw, &saved); err != nil {
		t.Fatal(err)
	}
	fm := saved.FindMax
	if fm == nil {
		t.Fatal("results.json has no find_max")
	}
	if int(fm.MaxEvents) != found || !fm.Converged {
		t.Errorf("results.json: max %g events/s, converged %v; want %d, true", fm.MaxEvents, fm.Converged, found)
	}
	if len(fm.Steps) < 3 || len(fm.Steps) > 7 {
		t.Errorf("%d steps, want 3 to 7 (--max-steps 7)", len(fm.Steps))
	}
	var failed int
	for i, st := range fm.Steps {
		line := fmt.Sprintf("step %2d: %8.0f events/s  ", i+1, st.Events)
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("the output does not list step %d (%q)", i+1, line)
		}
		if st.Pass {
			continue
		}
		failed++
		if len(st.Failed) == 0 || !strings.HasPrefix(st.Failed[0], "success>=99:") {
			t.Errorf("step %d at %g events/s failed on %q, want the success objective named", i+1, st.Events, st.Failed)
		}
	}
	if failed == 0 {
		t.Error("no step failed: the search never found the limit")
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
