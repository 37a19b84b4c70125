package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/stats"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Fault
		wantErr string // substring of the error; "" = valid
	}{
		{in: "at=20s,run=kill -9 $(cat broker.pid)", want: Fault{At: 20 * time.Second, Command: "kill -9 $(cat broker.pid)"}},
		{in: "at=1.5s, run=echo a,b,c", want: Fault{At: 1500 * time.Millisecond, Command: "echo a,b,c"}},
		{in: "at=0s,run=true", want: Fault{Command: "true"}},
		{in: "at=20s", wantErr: "missing run="},
		{in: "run=true", wantErr: "missing at="},
		{in: "at=20s,run=", wantErr: "run= is empty"},
		{in: "at=20,run=true", wantErr: `at="20" is not a duration`},
		{in: "at=soon,run=true", wantErr: "is not a duration"},
		{in: "at=-1s,run=true", wantErr: "negative"},
		{in: "when=1s,run=true", wantErr: `unknown field "when=1s"`},
		{in: "at=1srun=true", wantErr: "run= must start a field"},
	} {
		got, err := ParseFault(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--fault") {
				t.Errorf("ParseFault(%q) = %v, want an error naming --fault and containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestCatchUp: a receiver that opened at 4.5 s and drained by 7.5 s, 3,000 events in
// that time: 1,000 events/s; the busiest second overlapping the drain is second 6.
func TestCatchUp(t *testing.T) {
	rs := []stats.RecvSecond{{T: 0}, {T: 1}, {T: 2}, {T: 3}, {T: 4, Events: 400}, {T: 5, Events: 900},
		{T: 6, Events: 1300}, {T: 7, Events: 400}, {T: 8, Events: 0}, {T: 9, Events: 5000}}
	b := &Backlog{OpenedAt: 4500 * time.Millisecond, DrainTime: 3 * time.Second}
	catchUp(b, 3000, rs)
	if b.CatchUpEvents != 3000 || b.CatchUpRate != 1000 || b.PeakCatchUp != 1300 {
		t.Errorf("catch-up %d events, %g/s, peak %d; want 3000, 1000, 1300", b.CatchUpEvents, b.CatchUpRate, b.PeakCatchUp)
	}
	z := &Backlog{OpenedAt: time.Second}
	catchUp(z, 0, nil)
	if z.CatchUpRate != 0 || z.PeakCatchUp != 0 {
		t.Errorf("empty drain: %g/s, peak %d; want 0, 0", z.CatchUpRate, z.PeakCatchUp)
	}
}

// TestFaultRecovery: 100 requests/s of 1 event; a fault at 3.2 s fails seconds 3 and 4
// (ingress back at second 5: 1.8 s after the fault), deliveries stop in seconds 3–5 and
// catch up in 6 and 7 (backlog back to its level at the end of second 7: 4.8 s).
func TestFaultRecovery(t *testing.T) {
	ok := func(n, failed uint64) stats.LoadSecond { return stats.LoadSecond{OK: n, Failed: failed} }
	ls := []stats.LoadSecond{ok(100, 0), ok(100, 0), ok(100, 0), ok(20, 80), ok(0, 100), ok(100, 0), ok(100, 0), ok(100, 0), ok(100, 0)}
	del := []uint64{90, 100, 100, 0, 0, 0, 200, 130, 100, 10}
	rs := make([]stats.RecvSecond, len(del))
	for i, d := range del {
		rs[i] = stats.RecvSecond{T: i, Events: d}
	}
	in, dr := faultRecovery(ls, rs, 1, 3200*time.Millisecond, 100)
	if in == nil || *in != 1800*time.Millisecond {
		t.Errorf("ingress recovery %v, want 1.8s", in)
	}
	if dr == nil || *dr != 4800*time.Millisecond {
		t.Errorf("backlog drain %v, want 4.8s", dr)
	}

	// A fault nothing noticed: 0 and 0.
	flat := []stats.RecvSecond{{T: 0, Events: 100}, {T: 1, Events: 100}, {T: 2, Events: 100}}
	in, dr = faultRecovery(ls[:3], flat, 1, time.Second, 100)
	if in == nil || *in != 0 || dr == nil || *dr != 0 {
		t.Errorf("harmless fault: ingress %v, drain %v; want 0, 0", in, dr)
	}

	// Ingress that never answers again, deliveries that never catch up: nil, nil.
	down := []stats.LoadSecond{ok(100, 0), ok(100, 0), ok(0, 100)}
	in, dr = faultRecovery(down, []stats.RecvSecond{{T: 0, Events: 100}}, 1, time.Second, 100)
	if in != nil || dr != nil {
		t.Errorf("no recovery: ingress %v, drain %v; want nil, nil", in, dr)
	}
}

// TestRunFaults runs real commands: one writes a marker and exits 0, one fails with its
// output kept, one is due after the run's end and does not run.
func TestRunFaults(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	start := time.Now()
	go func() { time.Sleep(2 * time.Second); cancel() }()
	recs := runFaults(ctx, start, []Fault{
		{At: 0, Command: "echo hello > " + marker},
		{At: 100 * time.Millisecond, Command: "seq 1 2000; echo boom >&2; exit 3"},
		{At: time.Hour, Command: "touch " + filepath.Join(dir, "never")},
	})
	if _, err := os.Stat(marker); err != nil || !recs[0].Ran || recs[0].ExitCode != 0 {
		t.Errorf("marker fault: %+v, marker: %v", recs[0], err)
	}
	r := recs[1]
	if !r.Ran || r.ExitCode != 3 || !strings.HasSuffix(r.OutputTail, "2000\nboom\n") || len(r.OutputTail) != FaultOutputTail {
		t.Errorf("failing fault: ran %v exit %d, tail of %d bytes ending %q", r.Ran, r.ExitCode, len(r.OutputTail), r.OutputTail[max(len(r.OutputTail)-20, 0):])
	}
	if recs[2].Ran || recs[2].ExitCode != -1 || !strings.Contains(recs[2].Error, "not run") {
		t.Errorf("late fault: %+v, want not run", recs[2])
	}
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
		t.Error("the fault due after the run ran")
	}
}

// FuzzParseFault: any value parses or is refused naming --fault; a parsed fault has a
// command and a time not before the start.
func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"at=20s,run=kill -9 $(cat broker.pid)", "at=1s, run=a,b", "run=x", "at=-1s,run=x", "at=1s,x=2,run=y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseFault(s)
		if err != nil {
			if !strings.Contains(err.Error(), "--fault") {
				t.Errorf("ParseFault(%q): %v does not name --fault", s, err)
			}
			return
		}
		if got.Command == "" || got.At < 0 {
			t.Errorf("ParseFault(%q) = %+v", s, got)
		}
	})
}
