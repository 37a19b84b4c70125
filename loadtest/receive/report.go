package receive

import (
	"errors"
	"fmt"
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
	// HistEncoded is Hist in HdrHistogram's compressed V2 format (base64), set by
	// ReportForMerge.
	HistEncoded string `json:"e2e_hist,omitempty"`
}

// RunReport is one run id's accounting.
type RunReport struct {
	Run        string `json:"run_id"`
	Received   uint64 `json:"received"`
	HighestSeq uint64 `json:"highest_seq"`
	Lost       uint64 `json:"lost"`
	Duplicates uint64 `json:"duplicates"`
	// Seen is the set of sequence numbers received, set by ReportForMerge.
	Seen *stats.Bitset `json:"seen,omitempty"`
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

// ReportForMerge is Report with what Merge needs: each run's set of sequence numbers
// and the encoded latency histogram. It copies the sets, so it costs one bit per
// sequence number of every run.
func (r *Receiver) ReportForMerge() (*Report, error) {
	rep := r.Report()
	enc, err := rep.Hist.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	rep.HistEncoded = string(enc)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range rep.Runs {
		if rs := r.runs[rep.Runs[i].Run]; rs != nil {
			rep.Runs[i].Seen = new(stats.Bitset)
			rs.seen.CopyTo(rep.Runs[i].Seen)
		}
	}
	return rep, nil
}

// Merge combines the reports of receivers that shared the deliveries of the same runs
// (written by ReportForMerge). Per run, an event seen by any receiver is received and
// not lost; one seen by two receivers is a duplicate, as is one seen twice by one.
// Counts are summed, the latency histograms merged (every delivery counts, a duplicate
// at another receiver included), and the per-second series put on the earliest
// receiver's epoch and summed.
func Merge(reps []*Report) (*Report, error) {
	if len(reps) == 0 {
		return nil, errors.New("merge: no report")
	}
	m := &Report{Hist: stats.NewHist()}
	type acc struct {
		seen stats.Bitset
		dups uint64
	}
	runs := map[string]*acc{}
	for i, r := range reps {
		if i == 0 || r.Epoch.Before(m.Epoch) {
			m.Epoch = r.Epoch
		}
		if !r.First.IsZero() && (m.First.IsZero() || r.First.Before(m.First)) {
			m.First = r.First
		}
		if r.Last.After(m.Last) {
			m.Last = r.Last
		}
		m.Events += r.Events
		m.Warmup += r.Warmup
		m.Duplicates += r.Duplicates
		m.Invalid += r.Invalid
		m.Rejected += r.Rejected
		m.Refused += r.Refused
		if r.HistEncoded == "" {
			return nil, fmt.Errorf("merge: report %d has no e2e_hist (save it with sluice receive -o)", i+1)
		}
		h, err := hdrhistogram.Decode([]byte(r.HistEncoded))
		if err != nil {
			return nil, fmt.Errorf("merge: report %d: e2e_hist: %w", i+1, err)
		}
		m.Hist.Merge(h)
		for _, rr := range r.Runs {
			if rr.Seen == nil {
				return nil, fmt.Errorf("merge: report %d: run %s has no seen set (save it with sluice receive -o)", i+1, rr.Run)
			}
			a := runs[rr.Run]
			if a == nil {
				a = &acc{}
				runs[rr.Run] = a
			}
			cross := a.seen.Union(rr.Seen)
			a.dups += rr.Duplicates + cross
			m.Events -= cross
			m.Duplicates += cross
		}
	}
	shift := make([]int, len(reps))
	series := make([][]stats.RecvSecond, len(reps))
	for i, r := range reps {
		shift[i] = int(r.Epoch.Sub(m.Epoch).Round(time.Second) / time.Second)
		series[i] = r.Seconds
	}
	m.Seconds = stats.MergeRecvSeconds(shift, series...)
	m.Latency = stats.Summarize(m.Hist)
	if d := m.Last.Sub(m.First); d > 0 && m.Events > 0 {
		m.Rate = float64(m.Events-1) / d.Seconds()
	}
	for id, a := range runs {
		rr := RunReport{Run: id, Received: a.seen.Len(), Lost: a.seen.Gaps(), Duplicates: a.dups}
		if mx := a.seen.Max(); mx > 0 {
			rr.HighestSeq = mx - 1
		}
		m.Lost += rr.Lost
		m.Runs = append(m.Runs, rr)
	}
	sort.Slice(m.Runs, func(i, j int) bool { return m.Runs[i].Run < m.Runs[j].Run })
	return m, nil
}
