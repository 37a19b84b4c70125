// Package stats holds the measurement types the load kit shares: latency histograms
// and their summaries, per-second series, and sequence bitsets for loss and duplicate
// accounting.
package stats

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency histograms record microseconds from 1 µs to 10 minutes with 3 significant
// digits: any recorded value v is reported within v·10⁻³ of its true value.
const (
	histMin     = 1
	histMax     = int64(10 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

// NewHist returns an empty latency histogram (values in microseconds).
func NewHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMin, histMax, histSigFigs)
}

// Record adds d to h, clamped to the histogram's range.
func Record(h *hdrhistogram.Histogram, d time.Duration) {
	us := int64(d / time.Microsecond)
	if us < histMin {
		us = histMin
	}
	if us > histMax {
		us = histMax
	}
	_ = h.RecordValue(us) // cannot fail once clamped
}

// Summary is a latency distribution reduced to the numbers reports print.
type Summary struct {
	Count uint64        `json:"count"`
	Min   time.Duration `json:"min_ns"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P95   time.Duration `json:"p95_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p99_9_ns"`
	P9999 time.Duration `json:"p99_99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize reduces h. Percentile q is HDR's ValueAtQuantile: the smallest recorded
// value v (to the histogram's precision) such that at least q% of the values are ≤ v.
func Summarize(h *hdrhistogram.Histogram) Summary {
	if h == nil || h.TotalCount() == 0 {
		return Summary{}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Summary{
		Count: uint64(h.TotalCount()),
		Min:   us(h.Min()),
		Mean:  time.Duration(h.Mean() * float64(time.Microsecond)),
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P95:   us(h.ValueAtQuantile(95)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		P9999: us(h.ValueAtQuantile(99.99)),
		Max:   us(h.Max()),
	}
}
