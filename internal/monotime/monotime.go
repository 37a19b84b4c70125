// Package monotime reads the time from the monotonic clock alone, for the hot paths that
// only measure durations, set deadlines and compare times.
//
// time.Now reads two clocks, the wall clock and the monotonic one (two clock_gettime
// calls through the vDSO on Linux); a broker handling an event made 23 such calls, 6% of
// its user time (docs/benchmarks/hot-path.md). Now reads the monotonic clock only: one
// call, 30 against 45 ns (BenchmarkNow).
package monotime

import "time"

// base is the process's reference reading, taken once at start and never changed.
var base = time.Now()

// Now returns the current time as base plus the monotonic time elapsed since: one clock
// read. The result carries a monotonic reading, so Sub, Since, Until, Before, After and
// deadlines (net.Conn's, timers') measure it by the monotonic clock, exactly as they
// would a time.Now reading. Its wall reading drifts from the system clock's if that is
// stepped after the process started: never show, format or stamp it, and never compare
// its wall reading (Unix, UnixNano, Equal after Round(0)).
func Now() time.Time { return base.Add(time.Since(base)) }
