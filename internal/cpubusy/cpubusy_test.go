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

// TestMeterReadsTheProcess: with the real CPU time, an idle process is not busy, and
// one spinning on every CPU it may use is, in one of a few windows at least (another
// process may take the machine's CPUs for a window).
func TestMeterReadsTheProcess(t *testing.T) {
	m := New(20 * time.Millisecond)
	m.Busy(time.Now())
	time.Sleep(50 * time.Millisecond)
	if m.Busy(time.Now()) {
		t.Error("a sleeping process is busy")
	}
	var stop atomic.Bool
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for !stop.Load() { // spin
			}
		}()
	}
	defer stop.Store(true)
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		if m.Busy(time.Now()) {
			return
		}
	}
	t.Error("a process spinning on every CPU it may use was not busy in 10 windows")
}
