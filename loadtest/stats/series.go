package stats

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
