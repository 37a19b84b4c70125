package cpubusy

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestMeterBusy(t *testing.T) {
	procs := time.Duration(runtime.GOMAXPROCS(0))
	t0 := time.Unix(1000, 0)
	// Each step: wall time since the start, CPU time used so far, and what Busy says.
	type step struct {
		wall, cpu time.Duration
		want      bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"the first reading says false", []step{{0, 0, false}}},
		{"idle", []step{{0, 0, false}, {100 * time.Millisecond, procs * time.Millisecond, false}}},
		{"saturated", []step{{0, 0, false}, {100 * time.Millisecond, procs * 90 * time.Millisecond, true}}},
		{"exactly the share is saturated", []step{{0, 0, false}, {100 * time.Millisecond, procs * 75 * time.Millisecond, true}}},
		{"just under the share is not", []step{{0, 0, false}, {100 * time.Millisecond, procs * 74 * time.Millisecond, false}}},
		{"within the period the last answer holds", []step{
			{0, 0, false}, {100 * time.Millisecond, procs * 90 * time.Millisecond, true},
			{120 * time.Millisecond, procs * 90 * time.Millisecond, true}, // 20 ms later, no CPU: not re-read
			{200 * time.Millisecond, procs * 91 * time.Millisecond, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cpu time.Duration
			m := New(50 * time.Millisecond)
			m.cpuTime = func() (time.Duration, error) { return cpu, nil }
			for i, s := range tt.steps {
				cpu = s.cpu
				if got := m.Busy(t0.Add(s.wall)); got != s.want {
					t.Errorf("step %d (wall %v, cpu %v): Busy = %v, want %v", i, s.wall, s.cpu, got, s.want)
				}
			}
		})
	}
}

// TestMeterReadsTheProcess: the Meter New returns reads this process's real CPU time,
// which never goes back and grows while the process spins. How much of the machine the
// process gets is the machine's load to decide, so nothing here judges a share of it:
// TestMeterBusy checks the verdict on injected readings. The spin runs until the
// reading grows by a tick; the minute only bounds a hang.
func TestMeterReadsTheProcess(t *testing.T) {
	m := New(20 * time.Millisecond)
	first, err := m.cpuTime()
	if err != nil {
		t.Fatalf("reading the process's CPU time: %v", err)
	}
	if first < 0 {
		t.Fatalf("CPU time %v, want ≥ 0", first)
	}
	const tick = 10 * time.Millisecond
	var spin atomic.Int64 // what the loop writes, so that it is not optimised away
	last := first
	for deadline := time.Now().Add(time.Minute); last < first+tick; {
		if time.Now().After(deadline) {
			t.Fatalf("CPU time %v after a minute of spinning, %v before: it does not grow", last, first)
		}
		for i := 0; i < 1e6; i++ { // spin
			spin.Add(1)
		}
		now, err := m.cpuTime()
		if err != nil {
			t.Fatalf("reading the process's CPU time: %v", err)
		}
		if now < last {
			t.Fatalf("CPU time went back from %v to %v", last, now)
		}
		last = now
	}
	// Busy on the real readings answers without error either way; the first says false.
	if m.Busy(time.Now()) {
		t.Error("the first reading says busy")
	}
}
