package pacer

import (
	"testing"
	"time"
)

func TestDue(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		p    Pacer
		hits []uint64
		want []time.Duration // -1 = past the schedule
	}{
		{"constant 1000/s", Constant{Rate: 1000, Duration: time.Second},
			[]uint64{0, 1, 500, 999, 1000}, []time.Duration{0, ms, 500 * ms, 999 * ms, -1}},
		{"constant 3/s fractional", Constant{Rate: 3, Duration: time.Second},
			[]uint64{0, 1, 2, 3}, []time.Duration{0, 333333333, 666666667, -1}},
		{"constant endless", Constant{Rate: 10}, []uint64{1_000_000}, []time.Duration{100_000 * time.Second}},
		{"pace step change", Steps{{Rate: 100, Duration: time.Second}, {Rate: 200, Duration: time.Second}},
			[]uint64{0, 99, 100, 101, 299, 300}, []time.Duration{0, 990 * ms, time.Second, 1005 * ms, 1995 * ms, -1}},
		{"pace with pause", Steps{{Rate: 10, Duration: time.Second}, {Rate: 0, Duration: time.Second}, {Rate: 10, Duration: time.Second}},
			[]uint64{9, 10, 19, 20}, []time.Duration{900 * ms, 2 * time.Second, 2900 * ms, -1}},
		{"ramp 100→1000 in 3 steps", LogRamp{From: 100, To: 1000, StepDuration: time.Second, Count: 3},
			// rates 100, 316, 1000
			[]uint64{0, 99, 100, 415, 416, 1415, 1416}, []time.Duration{0, 990 * ms, time.Second, 1000*ms + 315*time.Second/316, 2 * time.Second, 2999 * ms, -1}},
		{"warm-up then pace", Warmup{Rate: 10, Duration: time.Second, Next: Steps{{Rate: 100, Duration: time.Second}}},
			[]uint64{0, 9, 10, 11, 109, 110}, []time.Duration{0, 900 * ms, time.Second, 1010 * ms, 1990 * ms, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, n := range tt.hits {
				got, ok := Due(tt.p, n)
				if tt.want[i] < 0 {
					if ok {
						t.Errorf("hit %d: due %v, want past the schedule", n, got)
					}
					continue
				}
				if !ok || absDiff(got, tt.want[i]) > time.Microsecond {
					t.Errorf("hit %d: due %v (ok %v), want %v", n, got, ok, tt.want[i])
				}
			}
		})
	}
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

func TestPaceWait(t *testing.T) {
	p := Constant{Rate: 100, Duration: time.Second}
	if w, stop := p.Pace(15*time.Millisecond, 2); stop || w != 5*time.Millisecond {
		t.Errorf("Pace(15ms, 2) = %v, %v; want 5ms, false", w, stop)
	}
	if w, stop := p.Pace(50*time.Millisecond, 2); stop || w != 0 {
		t.Errorf("behind schedule: Pace = %v, %v; want 0, false", w, stop)
	}
}

func TestLogRampSteps(t *testing.T) {
	r := LogRamp{From: 1000, To: 10000, StepDuration: 5 * time.Second}
	st := r.Steps()
	if len(st) != 11 {
		t.Fatalf("default count: %d steps, want 11 (ten per decade)", len(st))
	}
	if st[0].Rate != 1000 || st[10].Rate != 10000 || st[5].Rate != 3162 {
		t.Errorf("rates %v: want 1000 … 3162 … 10000", st)
	}
	for i := 1; i < len(st); i++ {
		if ratio := st[i].Rate / st[i-1].Rate; ratio < 1.24 || ratio > 1.28 {
			t.Errorf("step %d ratio %.3f, want ≈ 1.259", i, ratio)
		}
	}
}

func TestHitsBefore(t *testing.T) {
	p := Steps{{Rate: 100, Duration: time.Second}, {Rate: 300, Duration: time.Second}}
	for _, tt := range []struct {
		at   time.Duration
		want uint64
	}{{0, 0}, {time.Second, 100}, {1500 * time.Millisecond, 250}, {2 * time.Second, 400}, {time.Hour, 400}} {
		if got := HitsBefore(p, tt.at); got != tt.want {
			t.Errorf("HitsBefore(%v) = %d, want %d", tt.at, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	s, err := ParsePace("1000:30,1200:30s")
	if err != nil || len(s) != 2 || s[1].Rate != 1200 || s[1].Duration != 30*time.Second {
		t.Errorf("ParsePace = %v, %v", s, err)
	}
	for _, bad := range []string{"", "1000", "x:30", "1000:-1", "1000:abc"} {
		if _, err := ParsePace(bad); err == nil {
			t.Errorf("ParsePace(%q) accepted", bad)
		}
	}
	r, err := ParseRamp("1000:20000:5")
	if err != nil || r.From != 1000 || r.To != 20000 || r.StepDuration != 5*time.Second {
		t.Errorf("ParseRamp = %+v, %v", r, err)
	}
	if r, err := ParseRamp("1:10:1s:4"); err != nil || r.Count != 4 {
		t.Errorf("ParseRamp with count = %+v, %v", r, err)
	}
	for _, bad := range []string{"1000:20000", "0:10:5", "10:5:5", "1:10:5:0"} {
		if _, err := ParseRamp(bad); err == nil {
			t.Errorf("ParseRamp(%q) accepted", bad)
		}
	}
}

func BenchmarkDue(b *testing.B) {
	for _, bb := range []struct {
		name string
		p    Pacer
	}{
		{"constant", Constant{Rate: 10000, Duration: time.Hour}},
		{"steps", Steps{{Rate: 1000, Duration: 30 * time.Second}, {Rate: 1200, Duration: 30 * time.Second}}},
		{"ramp", LogRamp{From: 1000, To: 20000, StepDuration: 5 * time.Second}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				Due(bb.p, uint64(i%50000))
			}
		})
	}
}
