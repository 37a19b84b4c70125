package load

import (
	"net/url"
	"sort"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Result is the outcome of a run. All figures exclude the warm-up except Seconds (which
// flags warm-up seconds) and Accepted. It holds per-second aggregates, not per-request
// records, so its size grows by one row per second however high the rate.
type Result struct {
	Target      string    `json:"target"`
	Mode        string    `json:"mode"`
	Schedule    string    `json:"schedule"`
	Run         string    `json:"run_id"`
	Start       time.Time `json:"start"`
	Connections int       `json:"connections"`
	Cancelled   bool      `json:"cancelled,omitempty"`

	Warmup   time.Duration `json:"warmup_ns"`
	Attack   time.Duration `json:"attack_ns"` // first to last measured dispatch
	Wait     time.Duration `json:"wait_ns"`   // last dispatch to last completion
	Duration time.Duration `json:"duration_ns"`

	Requests         uint64  `json:"requests"`
	EventsPerRequest int     `json:"events_per_request"`
	IntendedRate     float64 `json:"intended_rate"` // requests/s the schedule asked for
	Rate             float64 `json:"rate"`          // requests/s actually dispatched
	Throughput       float64 `json:"throughput"`    // 2xx responses/s over attack + wait
	OK               uint64  `json:"ok"`
	Success          float64 `json:"success"` // OK / Requests
	BytesIn          uint64  `json:"bytes_in"`
	BytesOut         uint64  `json:"bytes_out"`

	StatusCodes map[string]uint64 `json:"status_codes"` // "0" counts transport errors
	Errors      map[string]uint64 `json:"errors"`

	Latency stats.Summary `json:"latency"`  // publish latency, from intended send time
	Lag     stats.Summary `json:"dispatch"` // actual − intended dispatch time
	Late    uint64        `json:"late"`     // dispatched more than LateAfter behind
	// Busy counts requests that found every worker (connection) busy when they fell
	// due, and were taken up more than LateAfter late.
	Busy uint64 `json:"busy"`
	// Saturated says the generator, not the target, failed to keep the schedule: it
	// dispatched below KeptRate of the intended rate, or more than MaxBusy of the
	// requests found every worker busy. (Late wake-ups from a CPU-starved machine show
	// in Lag and Late but alone do not make the generator saturated.)
	Saturated bool `json:"saturated"`

	Steps   []StepResult       `json:"steps,omitempty"`
	Seconds []stats.LoadSecond `json:"seconds"`

	// Accepted holds the sequence numbers acknowledged with 2xx, if tracked.
	Accepted *stats.Bitset `json:"-"`
	// Hist is the publish latency histogram (µs), for merging or re-reporting.
	Hist *hdrhistogram.Histogram `json:"-"`
	// LagHist is the dispatch lag histogram (µs), for merging.
	LagHist *hdrhistogram.Histogram `json:"-"`
}

// StepResult is one row of the per-step table of a pace or ramp run.
type StepResult struct {
	Step         int           `json:"step"`
	IntendedRate float64       `json:"intended_rate"`
	Rate         float64       `json:"rate"`
	Duration     time.Duration `json:"duration_ns"`
	Requests     uint64        `json:"requests"`
	Success      float64       `json:"success"`
	Latency      stats.Summary `json:"latency"`
}

func buildResult(o Options, u *url.URL, start time.Time, rec *recorder, steps []pacer.Step, seconds []stats.LoadSecond, busy uint64, cancelled bool) *Result {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := &Result{
		Target: u.String(), Mode: o.Template.Mode.String(), Run: o.Template.Run, Start: start,
		Connections: o.Connections, Cancelled: cancelled, Warmup: o.Warmup,
		Requests: rec.requests, EventsPerRequest: o.Template.EventsPerRequest(), OK: rec.ok,
		BytesIn: rec.bytesIn, BytesOut: rec.bytesOut,
		StatusCodes: map[string]uint64{}, Errors: rec.errs,
		Latency: stats.Summarize(rec.total), Lag: stats.Summarize(rec.lag),
		Seconds: seconds, Accepted: rec.accepted, Hist: rec.total, LagHist: rec.lag,
	}
	if s, ok := o.Pacer.(interface{ String() string }); ok {
		r.Schedule = s.String()
	}
	for c, n := range rec.codes {
		r.StatusCodes[codeKey(c)] = n
	}
	if !rec.firstSent.IsZero() {
		r.Attack = rec.lastSent.Sub(rec.firstSent)
		r.Wait = rec.lastDone.Sub(rec.lastSent)
		r.Duration = r.Attack + r.Wait
	}
	var sched time.Duration
	for _, s := range steps {
		sched += s.Duration
	}
	if sched > 0 {
		r.IntendedRate = float64(o.hitsBefore(o.Warmup+sched)-shareOf(o.WarmupHits, o.ShareIndex, o.ShareOf)) / sched.Seconds()
	}
	if r.Attack > 0 {
		// n dispatches span n−1 intervals
		r.Rate = float64(r.Requests-1) / r.Attack.Seconds()
	}
	if r.Duration > 0 {
		r.Throughput = float64(r.OK) / r.Duration.Seconds()
	}
	if r.Requests > 0 {
		r.Success = float64(r.OK) / float64(r.Requests)
	}
	r.Late = uint64(rec.lag.TotalCount()) - countBelow(rec.lag, LateAfter)
	r.Busy = busy
	r.Saturated = !cancelled && r.Requests > 10 &&
		((r.IntendedRate > 0 && r.Rate < KeptRate*r.IntendedRate) || float64(busy) > MaxBusy*float64(r.Requests))
	if len(rec.steps) > 0 {
		for i, s := range rec.steps {
			sr := StepResult{Step: i + 1, IntendedRate: steps[i].Rate / float64(o.ShareOf), Duration: steps[i].Duration,
				Requests: s.requests, Latency: stats.Summarize(s.hist)}
			if s.requests > 0 {
				sr.Success = float64(s.ok) / float64(s.requests)
			}
			if d := s.last.Sub(s.first); d > 0 {
				sr.Rate = float64(s.requests-1) / d.Seconds()
			}
			r.Steps = append(r.Steps, sr)
		}
	}
	sort.Slice(r.Seconds, func(i, j int) bool { return r.Seconds[i].T < r.Seconds[j].T })
	return r
}

// countBelow counts recorded values below d.
func countBelow(h *hdrhistogram.Histogram, d time.Duration) uint64 {
	limit := int64(d / time.Microsecond)
	var n uint64
	for _, b := range h.Distribution() {
		if b.To < limit {
			n += uint64(b.Count)
		}
	}
	return n
}
