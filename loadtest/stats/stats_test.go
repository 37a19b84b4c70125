package stats

import (
	"testing"
	"time"
)

func TestSummarizeKnownSamples(t *testing.T) {
	tests := []struct {
		name    string
		samples func(record func(time.Duration))
		want    Summary // only non-zero fields are checked, to 0.1%
	}{
		{"1..10000 µs uniform", func(rec func(time.Duration)) {
			for i := 1; i <= 10000; i++ {
				rec(time.Duration(i) * time.Microsecond)
			}
		}, Summary{Count: 10000, Min: time.Microsecond, P50: 5000 * time.Microsecond, P90: 9000 * time.Microsecond,
			P99: 9900 * time.Microsecond, P999: 9990 * time.Microsecond, P9999: 9999 * time.Microsecond, Max: 10000 * time.Microsecond,
			Mean: 5000500 * time.Nanosecond}},
		{"one outlier in 10000", func(rec func(time.Duration)) {
			for i := 0; i < 9999; i++ {
				rec(time.Millisecond)
			}
			rec(time.Second)
		}, Summary{Count: 10000, P50: time.Millisecond, P99: time.Millisecond, P999: time.Millisecond, Max: time.Second}},
		{"clamped below 1µs", func(rec func(time.Duration)) { rec(10 * time.Nanosecond) }, Summary{Count: 1, Min: time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHist()
			tt.samples(func(d time.Duration) { Record(h, d) })
			got := Summarize(h)
			if got.Count != tt.want.Count {
				t.Errorf("count %d, want %d", got.Count, tt.want.Count)
			}
			check := func(name string, g, w time.Duration) {
				if w == 0 {
					return
				}
				if diff := float64(g-w) / float64(w); diff > 0.001 || diff < -0.001 {
					t.Errorf("%s = %v, want %v ± 0.1%%", name, g, w)
				}
			}
			check("min", got.Min, tt.want.Min)
			check("mean", got.Mean, tt.want.Mean)
			check("p50", got.P50, tt.want.P50)
			check("p90", got.P90, tt.want.P90)
			check("p99", got.P99, tt.want.P99)
			check("p99.9", got.P999, tt.want.P999)
			check("p99.99", got.P9999, tt.want.P9999)
			check("max", got.Max, tt.want.Max)
		})
	}
}

func TestBitsetLossAndDuplicates(t *testing.T) {
	tests := []struct {
		name              string
		received          []uint64
		wantLen, wantGaps uint64
		wantDups          int
	}{
		{"in order", []uint64{0, 1, 2, 3}, 4, 0, 0},
		{"reordered", []uint64{3, 0, 2, 1}, 4, 0, 0},
		{"gaps", []uint64{0, 2, 5, 130}, 4, 127, 0},
		{"duplicates", []uint64{0, 1, 1, 2, 0}, 3, 0, 2},
		{"empty", nil, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Bitset
			dups := 0
			for _, s := range tt.received {
				if b.Add(s) {
					dups++
				}
			}
			if b.Len() != tt.wantLen || b.Gaps() != tt.wantGaps || dups != tt.wantDups {
				t.Errorf("len %d gaps %d dups %d, want %d %d %d", b.Len(), b.Gaps(), dups, tt.wantLen, tt.wantGaps, tt.wantDups)
			}
		})
	}
}

func TestBitsetMissing(t *testing.T) {
	var accepted, seen Bitset
	for i := uint64(0); i < 200; i++ {
		accepted.Add(i)
		if i%50 != 7 {
			seen.Add(i)
		}
	}
	var missing []uint64
	n := accepted.Missing(&seen, func(s uint64) { missing = append(missing, s) })
	if n != 4 || len(missing) != 4 || missing[0] != 7 || missing[3] != 157 {
		t.Errorf("Missing = %d %v, want 4 [7 57 107 157]", n, missing)
	}
}
