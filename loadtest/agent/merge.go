package agent

import (
	"time"

	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Merged is a distributed run: the merged result, in the schema of a single run, and
// each agent's part. It encodes as the result's fields plus "agents".
type Merged struct {
	*load.Result
	Agents []AgentReport `json:"agents"`
}

// Failed lists the agents that failed or fell behind.
func (m *Merged) Failed() []AgentReport {
	var out []AgentReport
	for _, a := range m.Agents {
		if a.Failed() {
			out = append(out, a)
		}
	}
	return out
}

// Merge combines the results of generators that ran shares of one schedule from a
// common start. Counts, bytes, status codes and errors are summed; the latency and
// lag summaries come from the merged histograms, so they are those of the union of
// the requests; the per-second series are merged by second (stats.MergeLoadSeconds).
// Per-step latency, kept per agent without its histogram, is the highest agent's.
func Merge(rs []*Result) *load.Result {
	first := rs[0].Result
	m := &load.Result{
		Target: first.Target, Mode: first.Mode, Schedule: first.Schedule, Run: first.Run,
		Start: first.Start, Warmup: first.Warmup, EventsPerRequest: first.EventsPerRequest,
		StatusCodes: map[string]uint64{}, Errors: map[string]uint64{},
		Hist: stats.NewHist(), LagHist: stats.NewHist(),
	}
	var series [][]stats.LoadSecond
	for _, r := range rs {
		m.Connections += r.Connections
		m.Cancelled = m.Cancelled || r.Cancelled
		m.Attack, m.Wait = max(m.Attack, r.Attack), max(m.Wait, r.Wait)
		m.Duration = max(m.Duration, r.Duration)
		m.Requests += r.Requests
		m.IntendedRate += r.IntendedRate
		m.Rate += r.Rate
		m.OK += r.OK
		m.BytesIn += r.BytesIn
		m.BytesOut += r.BytesOut
		for k, v := range r.StatusCodes {
			m.StatusCodes[k] += v
		}
		for k, v := range r.Errors {
			m.Errors[k] += v
		}
		m.Late += r.Late
		m.Busy += r.Busy
		m.Saturated = m.Saturated || r.Saturated
		m.Hist.Merge(r.Hist)
		m.LagHist.Merge(r.LagHist)
		series = append(series, r.Seconds)
		mergeSteps(m, r.Steps)
	}
	if m.Duration > 0 {
		m.Throughput = float64(m.OK) / m.Duration.Seconds()
	}
	if m.Requests > 0 {
		m.Success = float64(m.OK) / float64(m.Requests)
	}
	m.Latency, m.Lag = stats.Summarize(m.Hist), stats.Summarize(m.LagHist)
	m.Seconds = stats.MergeLoadSeconds(series...)
	return m
}

func mergeSteps(m *load.Result, steps []load.StepResult) {
	for i, s := range steps {
		if i >= len(m.Steps) {
			m.Steps = append(m.Steps, load.StepResult{Step: s.Step, Duration: s.Duration})
		}
		d := &m.Steps[i]
		ok := d.Success*float64(d.Requests) + s.Success*float64(s.Requests)
		d.Requests += s.Requests
		d.IntendedRate += s.IntendedRate
		d.Rate += s.Rate
		if d.Requests > 0 {
			d.Success = ok / float64(d.Requests)
		}
		d.Latency = maxSummary(d.Latency, s.Latency)
	}
}

func maxSummary(a, b stats.Summary) stats.Summary {
	if a.Count == 0 {
		return b
	}
	mx := func(x, y time.Duration) time.Duration { return max(x, y) }
	return stats.Summary{Count: a.Count + b.Count, Min: min(a.Min, b.Min),
		Mean: mx(a.Mean, b.Mean), P50: mx(a.P50, b.P50), P90: mx(a.P90, b.P90), P95: mx(a.P95, b.P95),
		P99: mx(a.P99, b.P99), P999: mx(a.P999, b.P999), P9999: mx(a.P9999, b.P9999), Max: mx(a.Max, b.Max)}
}
