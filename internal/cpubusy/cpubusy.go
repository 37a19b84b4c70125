// Package cpubusy tells whether this process has recently used (nearly) all the CPU it
// may use: GOMAXPROCS CPUs. Two parts of the broker change course when it has, because
// then every goroutine waits for a CPU, whatever it waits on otherwise:
//
//   - the adaptive in-flight limit of deliveries (overload.InFlight) does not read a
//     latency climb as a slow subscriber (every attempt's latency climbs while ingress
//     saturates the CPU; cutting the in-flight limit then only starves delivery);
//   - the lean HTTP server's accept loop polls for new connections on a timer instead of
//     waiting on the network poller, whose wake-ups a saturated single-P scheduler
//     serves last (internal/httpserver/accept.go).
//
// See docs/decisions/0001-latency-climb-floor.md and
// docs/decisions/0011-accept-loop-polls-while-saturated.md.
package cpubusy

import (
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Saturated is the share of its CPUs (GOMAXPROCS) above which the process counts as
// saturated.
const Saturated = 0.75

// Meter reads the process's CPU time (one getrusage call) at most once per period and
// compares it with the wall time since the reading before. The zero value is not
// usable; use New. Safe for concurrent use.
type Meter struct {
	every     time.Duration
	cpuTime   func() (time.Duration, error) // the process's CPU time so far
	mu        sync.Mutex
	last      time.Time
	lastCPU   time.Duration
	saturated bool
}

// New returns a Meter that reads again when its last reading is older than every: often
// enough to follow an overload within the caller's reaction time, rarely enough to cost
// nothing.
func New(every time.Duration) *Meter { return &Meter{every: every, cpuTime: processCPU} }

// processCPU is the CPU time, user and system, this process has used so far.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Busy reports whether the process used more than Saturated of its CPUs between the
// last two readings, reading again when the last one is older than the Meter's period.
// The first call only reads, and says false.
func (m *Meter) Busy(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.last) < m.every {
		return m.saturated
	}
	cpu, err := m.cpuTime()
	if err != nil {
		return false
	}
	if !m.last.IsZero() {
		wall := now.Sub(m.last)
		m.saturated = float64(cpu-m.lastCPU) >= Saturated*float64(wall)*float64(runtime.GOMAXPROCS(0))
	}
	m.last, m.lastCPU = now, cpu
	return m.saturated
}
