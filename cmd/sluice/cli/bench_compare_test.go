package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/loadtest/report"
)

// TestBenchCompareRuns: `sluice bench --compare` takes any number (two or more) of
// report directories, each a column named by its --label or else its directory.
func TestBenchCompareRuns(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for _, name := range []string{"one", "two", "three"} {
		d := filepath.Join(root, name)
		var out, errOut bytes.Buffer
		args := []string{"bench", "--direct", "--rate", "100", "--duration", "1s", "--receiver-addr", "127.0.0.1:0", "-q", "--out", d}
		if name == "three" {
			args = append(args, "--label", "third run")
		}
		if code := Execute(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("bench %s: exit %d: %s", name, code, errOut.String())
		}
		dirs = append(dirs, d)
	}
	tests := []struct {
		name     string
		dirs     []string
		wantCode int
		want     []string // in summary.txt's header, or in stderr when the exit code is not 0
	}{
		{"three runs", dirs, 0, []string{"metric", "one", "two", "third run"}},
		{"two runs", dirs[:2], 0, []string{"metric", "one", "two"}},
		{"one run", dirs[:1], 1, []string{"--compare needs two or more report directories"}},
		{"not a report", []string{dirs[0], root}, 1, []string{"results.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cmp")
			var stdout, stderr bytes.Buffer
			code := Execute(context.Background(), append([]string{"bench", "--compare", "--out", out}, tc.dirs...), &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.wantCode, stderr.String())
			}
			if code != 0 {
				for _, w := range tc.want {
					if !strings.Contains(stderr.String(), w) {
						t.Errorf("stderr %q lacks %q", stderr.String(), w)
					}
				}
				return
			}
			sum, err := os.ReadFile(filepath.Join(out, report.SummaryFile))
			if err != nil {
				t.Fatal(err)
			}
			head, _, _ := strings.Cut(string(sum), "\n")
			cols := splitColumns(head)
			if strings.Join(cols, "|") != strings.Join(tc.want, "|") {
				t.Errorf("summary header columns %q, want %q", cols, tc.want)
			}
		})
	}
}

// splitColumns splits a tabwriter line at runs of two or more spaces.
func splitColumns(line string) []string {
	var cols []string
	for _, f := range strings.Split(line, "  ") {
		if f = strings.TrimSpace(f); f != "" {
			cols = append(cols, f)
		}
	}
	return cols
}
