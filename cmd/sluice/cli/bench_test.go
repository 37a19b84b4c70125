package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchFindMaxRefusesBadFlags(t *testing.T) {
	base := []string{"bench", "--target", "http://127.0.0.1:1/", "--find-max", "--quiet", "--receiver-addr", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no objectives", nil, "--slo is required"},
		{"a rate", []string{"--slo", "loss=0", "--rate", "50"}, "drop --rate"},
		{"a pace", []string{"--slo", "loss=0", "--pace", "50:1"}, "drop --pace"},
		{"a ramp", []string{"--slo", "loss=0", "--ramp", "50:100:1"}, "drop --ramp"},
		{"start rate 0", []string{"--slo", "loss=0", "--start-rate", "0"}, "--start-rate 0"},
		{"precision 0", []string{"--slo", "loss=0", "--precision", "0"}, "--precision 0%"},
		{"precision above 100", []string{"--slo", "loss=0", "--precision", "150"}, "--precision 150%"},
		{"no steps", []string{"--slo", "loss=0", "--max-steps", "0"}, "--max-steps 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Execute(context.Background(), append(append([]string{}, base...), tc.args...), &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// TestBenchFindMaxDirect runs a whole search in-process against bench's own receiver
// with an objective no rate holds (rate>1000000 requests/s): a failing step is decided
// however fast the machine is. The search halves 4, 2, 1 requests/s, prints each step
// with the objective that failed, says no rate held (exit 2), and saves the search and
// the last step's run in results.json.
func TestBenchFindMaxDirect(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report")
	var stdout, stderr bytes.Buffer
	code := Execute(context.Background(), []string{"bench", "--direct", "--receiver-addr", "127.0.0.1:0",
		"--find-max", "--slo", "loss=0,rate>1000000", "--start-rate", "4", "--duration", "1s",
		"--connections", "2", "--settle", "20s", "--quiet", "--out", out}, &stdout, &stderr)
	if code != exitSLOFailed || !strings.Contains(stderr.String(), "no rate held the objectives") {
		t.Fatalf("exit %d, want %d saying no rate held\n%s\n%s", code, exitSLOFailed, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		"step  1:        4 events/s  FAIL rate>1000000: ", "step  2:        2 events/s  FAIL rate>1000000: ",
		"step  3:        1 events/s  FAIL rate>1000000: ",
		"max sustainable: 0 events/s\n", "search: every rate failed, down to 1 request/s\n",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "step  4:") {
		t.Errorf("a step below 1 request/s:\n%s", stdout.String())
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Accepted uint64 `json:"accepted"`
		FindMax  struct {
			Max     float64 `json:"max"`
			Ceiling float64 `json:"ceiling"`
			Steps   []struct {
				Rate   float64  `json:"rate"`
				Pass   bool     `json:"pass"`
				Failed []string `json:"failed"`
			} `json:"steps"`
		} `json:"find_max"`
	}
	if err := json.Unmarshal(raw, &saved); err != nil {
		t.Fatal(err)
	}
	fm := saved.FindMax
	if fm.Max != 0 || fm.Ceiling != 1 || len(fm.Steps) != 3 || fm.Steps[2].Pass || len(fm.Steps[2].Failed) != 1 {
		t.Errorf("results.json: max %g, ceiling %g, steps %+v; want 0, 1 and three failed steps", fm.Max, fm.Ceiling, fm.Steps)
	}
	// With no passing step, the report is the last step's run: 1 request/s for 1 s.
	if saved.Accepted != 1 {
		t.Errorf("results.json: %d events accepted, want the 1 of the last step", saved.Accepted)
	}
}
