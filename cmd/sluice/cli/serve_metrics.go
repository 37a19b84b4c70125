package cli

import "github.com/prometheus/client_golang/prometheus"

// gatherInSequence returns a Gatherer of everything registered in reg, before or after
// the call, that collects reg's collectors one after another on one goroutine.
//
// prometheus.Registry.Gather collects in parallel: whenever no metric is waiting it
// starts one more collecting goroutine and calls runtime.Gosched, up to once per
// collector. Gosched puts the gathering goroutine on Go's global run queue, which a
// saturated scheduler serves once in 61 turns; with one P under overload each trip
// waited its turn, and a broker registers dozens of collectors, so a /metrics scrape
// took far longer than /healthz (docs/decisions/0013-metrics-gathered-in-sequence.md). A
// Registry is itself a Collector whose Collect calls its collectors in sequence: as the
// only collector of a second registry it is gathered by one goroutine, with no Gosched,
// and the second registry's Gather still checks, sorts and merges what it collects.
func gatherInSequence(reg *prometheus.Registry) prometheus.Gatherer {
	outer := prometheus.NewRegistry()
	outer.MustRegister(reg)
	return outer
}
