package receive

import (
	"sort"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Report is what a receiver saw. Lost counts, per run, the sequence numbers below the
// highest one received that never arrived: events lost after the last one received are
// invisible to a receiver alone (bench compares with what the target accepted instead).
type Report struct {
	Epoch      time.Time          `json:"epoch"`
	First      time.Time          `json:"first_event"`
	Last       time.Time          `json:"last_event"`
	Events     uint64             `json:"events"` // distinct events, warm-up included
	Warmup     uint64             `json:"warmup_events"`
	Duplicates uint64             `json:"duplicates"`
	Lost       uint64             `json:"lost"`
	Invalid    uint64             `json:"invalid"`
	Rejected   uint64             `json:"rejected"`
	Refused    uint64             `json:"refused"` // requests answered 503 while refusing (bench --backlog)
	Rate       float64            `json:"rate"`    // events/s from first to last event
	Latency    stats.Summary      `json:"e2e_latency"`
	Runs       []RunReport        `json:"runs"`
	Seconds    []stats.RecvSecond `json:"seconds"`

	// Hist is the end-to-end latency histogram (µs).
	Hist *hdrhistogram.Histogram `json:"-"`
}

// RunReport is one run id's accounting.
type RunReport struct {
	Run        string `json:"run_id"`
	Received   uint64 `json:"received"`
	HighestSeq uint64 `json:"highest_seq"`
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
}

// Report returns a consistent snapshot.
func (r *Receiver) Report() *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &Report{
		Epoch: r.epoch, First: r.first, Last: r.last,
		Events: r.events, Warmup: r.warmup, Duplicates: r.dups, Invalid: r.invalid, Rejected: r.rejected, Refused: r.refused,
		Latency: stats.Summarize(r.total), Seconds: append([]stats.RecvSecond(nil), r.series...),
		Hist: hdrhistogram.Import(r.total.Export()),
	}
	if d := r.last.Sub(r.first); d > 0 {
		rep.Rate = float64(r.events-1) / d.Seconds()
	}
	for id, rs := range r.runs {
		rr := RunReport{Run: id, Received: rs.seen.Len(), Lost: rs.seen.Gaps(), Duplicates: rs.dups}
		if m := rs.seen.Max(); m > 0 {
			rr.HighestSeq = m - 1
		}
		rep.Lost += rr.Lost
		rep.Runs = append(rep.Runs, rr)
	}
	sort.Slice(rep.Runs, func(i, j int) bool { return rep.Runs[i].Run < rep.Runs[j].Run })
	return rep
}
