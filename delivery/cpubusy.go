package delivery

import (
	"runtime"
	"sync"
	"syscall"
	"time"
)

// cpuBusyEvery is how often cpuBusy re-reads the process's CPU time: often enough to
// follow an overload within a few congestion windows, rarely enough to cost nothing (one
// getrusage call).
const cpuBusyEvery = 50 * time.Millisecond

// cpuSaturated is the share of its CPUs (GOMAXPROCS) above which the process counts as
// saturated.
const cpuSaturated = 0.75

// cpuBusy tells whether this process has recently used (nearly) all the CPU it may use.
// The adaptive limiter asks it before reading a latency climb as a slow subscriber: when
// the broker's own CPU is saturated (by ingress answering an overload, say) every
// attempt's latency climbs because the worker, and the goroutine reading the response,
// wait for the CPU, not because the subscriber is slow; cutting the in-flight limit then
// only starves delivery (see docs/overload.md). The zero value is not usable; use
// newCPUBusy. Safe for concurrent use.
type cpuBusy struct {
	mu        sync.Mutex
	last      time.Time
	lastCPU   time.Duration
	saturated bool
}

func newCPUBusy() *cpuBusy { return &cpuBusy{} }

// busy reports whether the process used more than cpuSaturated of its CPUs between the
// last two readings, reading again when the last one is older than cpuBusyEvery.
func (c *cpuBusy) busy(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.last) < cpuBusyEvery {
		return c.saturated
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return false
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if !c.last.IsZero() {
		wall := now.Sub(c.last)
		c.saturated = float64(cpu-c.lastCPU) >= cpuSaturated*float64(wall)*float64(runtime.GOMAXPROCS(0))
	}
	c.last, c.lastCPU = now, cpu
	return c.saturated
}
