package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBenchBacklogAndFaultFlags: every bad --backlog or --fault is refused before any
// load, with an error naming the flag.
func TestBenchBacklogAndFaultFlags(t *testing.T) {
	base := []string{"bench", "--target", "http://127.0.0.1:1/", "--quiet", "--receiver-addr", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"backlog 0", []string{"--backlog", "0"}, "--backlog 0: give the number of events"},
		{"backlog negative", []string{"--backlog", "-5"}, "--backlog -5"},
		{"backlog too big", []string{"--backlog", "10000001"}, "--backlog 10000001: at most 10000000"},
		{"backlog not a number", []string{"--backlog", "many"}, `invalid argument "many" for "--backlog"`},
		{"backlog with duration", []string{"--backlog", "10", "--duration", "5s"}, "drop --duration"},
		{"backlog with pace", []string{"--backlog", "10", "--pace", "5:1"}, "drop --pace"},
		{"backlog with warmup", []string{"--backlog", "10", "--warmup", "1s"}, "drop --warmup"},
		{"backlog direct", []string{"--backlog", "10", "--direct"}, "--backlog needs a broker"},
		{"backlog find-max", []string{"--backlog", "10", "--find-max", "--slo", "loss=0"}, "--backlog and --find-max"},
		{"fault without run", []string{"--fault", "at=1s"}, "missing run="},
		{"fault bad at", []string{"--fault", "at=1x,run=true"}, `at="1x" is not a duration`},
		{"fault without at", []string{"--fault", "run=true"}, "missing at="},
		{"fault empty run", []string{"--fault", "at=1s,run= "}, "run= is empty"},
		{"fault find-max", []string{"--fault", "at=1s,run=true", "--find-max", "--slo", "loss=0"}, "--fault runs once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Execute(context.Background(), append(append([]string{}, base...), tc.args...), &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	args := append(append([]string{}, base...), strings.Split(strings.Repeat("--fault at=1s,run=true ", 33), " ")...)
	if code := Execute(context.Background(), args[:len(args)-1], &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--fault given 33 times, at most 32") {
		t.Errorf("33 faults: exit %d, stderr %q", code, stderr.String())
	}
}
