package stats

import "slices"

// LoadSecond aggregates one second of a load run. Counts of completions, failures and
// latency are by completion second; Intended counts the requests the schedule placed in
// the second and Sent the ones actually dispatched in it.
type LoadSecond struct {
	T        int     `json:"t"`        // seconds since the start of the run (warm-up included)
	Warmup   bool    `json:"warmup"`   // the second lies in the warm-up
	Intended uint64  `json:"intended"` // requests due in this second
	Sent     uint64  `json:"sent"`     // requests dispatched in this second
	Done     uint64  `json:"done"`     // requests completed in this second
	OK       uint64  `json:"ok"`       // of those, 2xx
	Failed   uint64  `json:"failed"`   // of those, non-2xx or transport error
	P50      float64 `json:"p50_ms"`   // publish latency percentiles of Done, ms
	P90      float64 `json:"p90_ms"`
	P99      float64 `json:"p99_ms"`
	P999     float64 `json:"p99_9_ms"`
	Max      float64 `json:"max_ms"`
	InFlight int64   `json:"in_flight"` // requests outstanding at the end of the second
}

// RecvSecond aggregates one second at a receiver.
type RecvSecond struct {
	T          int     `json:"t"`          // seconds since the receiver's epoch
	Events     uint64  `json:"events"`     // events received
	Duplicates uint64  `json:"duplicates"` // of those, already seen
	P50        float64 `json:"p50_ms"`     // end-to-end latency percentiles, ms
	P90        float64 `json:"p90_ms"`
	P99        float64 `json:"p99_ms"`
	P999       float64 `json:"p99_9_ms"`
	Max        float64 `json:"max_ms"`
}

// MergeLoadSeconds merges the per-second series of generators that shared one
// schedule and one time origin: rows with the same T are summed (counts, in-flight);
// latency percentiles, which cannot be merged without the histograms, take the
// highest of the generators' values.
func MergeLoadSeconds(series ...[]LoadSecond) []LoadSecond {
	byT := map[int]*LoadSecond{}
	for _, s := range series {
		for _, x := range s {
			m, ok := byT[x.T]
			if !ok {
				c := x
				byT[x.T] = &c
				continue
			}
			m.Warmup = m.Warmup || x.Warmup
			m.Intended += x.Intended
			m.Sent += x.Sent
			m.Done += x.Done
			m.OK += x.OK
			m.Failed += x.Failed
			m.InFlight += x.InFlight
			m.P50, m.P90, m.P99 = max(m.P50, x.P50), max(m.P90, x.P90), max(m.P99, x.P99)
			m.P999, m.Max = max(m.P999, x.P999), max(m.Max, x.Max)
		}
	}
	out := make([]LoadSecond, 0, len(byT))
	for _, m := range byT {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b LoadSecond) int { return a.T - b.T })
	return out
}

// MergeRecvSeconds merges receivers' per-second series. shift[i] is added to series
// i's T to put every receiver on a common epoch. Counts are summed; percentiles take
// the highest value.
func MergeRecvSeconds(shift []int, series ...[]RecvSecond) []RecvSecond {
	byT := map[int]*RecvSecond{}
	for i, s := range series {
		for _, x := range s {
			x.T += shift[i]
			m, ok := byT[x.T]
			if !ok {
				c := x
				byT[x.T] = &c
				continue
			}
			m.Events += x.Events
			m.Duplicates += x.Duplicates
			m.P50, m.P90, m.P99 = max(m.P50, x.P50), max(m.P90, x.P90), max(m.P99, x.P99)
			m.P999, m.Max = max(m.P999, x.P999), max(m.Max, x.Max)
		}
	}
	out := make([]RecvSecond, 0, len(byT))
	for _, m := range byT {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b RecvSecond) int { return a.T - b.T })
	return out
}
