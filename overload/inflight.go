package overload

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluice-broker/sluice/internal/cpubusy"
)

// Parameters of the adaptive (AIMD) in-flight limit; see InFlight.
const (
	aimdDecrease      = 0.5                  // β: multiplicative decrease on congestion
	latencyFactor     = 2.0                  // smoothed latency above factor × baseline is congestion…
	latencyMargin     = 2 * time.Millisecond // …when also at least this much above it
	minCutInterval    = 5 * time.Millisecond // floor of the one-cut-per-window interval
	srttGain          = 1.0 / 8              // EWMA gain of the smoothed latency (as TCP's SRTT)
	baselineDriftGain = 1.0 / 256            // how fast the baseline follows a lasting rise
	climbFloorShare   = 1.0 / 8              // a latency climb alone cuts to no less than this share of the maximum
	// cpuBusyEvery is how often InFlight re-reads whether the broker's CPU is
	// saturated: often enough to follow an overload within a few congestion windows.
	cpuBusyEvery = 50 * time.Millisecond
)

// InFlight is the limit of the attempts in flight toward one subscriber (a trigger's
// deliveries; package delivery applies it to its semaphore). Without adaptation the
// limit is the maximum, MaxInFlight. With adaptation it is additive-increase/multiplicative-decrease,
// the TCP congestion-avoidance rule applied to concurrency:
//
//	on a congestion signal:  L ← max(1, β·L)      β = 0.5, at most once per window
//	on any other response:   L ← min(M, L + 1/L)
//
// where M is the maximum (a trigger's MaxInFlight) and the window is the smoothed latency S (at least
// 5 ms), so the responses to requests sent before a cut, which still reflect the old
// load, cannot cut again. Since about L responses arrive per window, L grows by about one
// per window while the subscriber is healthy, and halves within a window when it is not.
// A congestion signal is a 429, 502, 503 or 504 (what an activator or a saturated sink
// answers while replicas come and go), an attempt that timed out, or a latency climb:
//
//	S ← S + (x − S)/8                   x the latency of each completed attempt
//	B ← S if S < B, else B + (S − B)/256 the baseline: the best smoothed latency seen,
//	                                     drifting up slowly so a lasting change is learnt
//	climb ⇔ S > 2·B and S − B > 2 ms
//
// A climb alone cuts no lower than M/8 (the climb floor), and not at all while this
// process has used more than 75% of its CPUs over the last 50 ms: latency also climbs
// when the broker or the subscriber shares a busy CPU, and cutting to one attempt in
// flight then collapses delivery to one event per round trip
// (docs/decisions/0001-latency-climb-floor.md).
// Other failures (400, 404, 500, connection refused) leave L unchanged: they say nothing
// about load. The effective limit is ⌊L⌋, at least 1. Safe for concurrent use.
type InFlight struct {
	apply func(n int) // told the effective limit whenever it changes, under mu

	mu       sync.Mutex
	adaptive bool
	max      int
	limit    float64
	srtt     float64 // smoothed latency, ns
	base     float64 // baseline latency, ns
	lastCut  time.Time
	cpu      *cpubusy.Meter // whether this process's own CPU is saturated: a latency climb then says nothing of the subscriber
}

// NewInFlight returns the limit of max attempts in flight, adapting (AIMD) if adaptive.
// apply is told the effective limit each time it changes (never at once: it starts at
// max), with the limit's lock held; it must not call back into the InFlight.
func NewInFlight(max int, adaptive bool, apply func(n int)) *InFlight {
	return &InFlight{apply: apply, adaptive: adaptive, max: max, limit: float64(max), cpu: cpubusy.New(cpuBusyEvery)}
}

// Current returns the effective limit.
func (l *InFlight) Current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// SetMax applies a new maximum (a trigger's MaxInFlight changed by a reload).
func (l *InFlight) SetMax(m int) {
	l.mu.Lock()
	l.max = m
	if !l.adaptive || l.limit > float64(m) {
		l.limit = float64(m)
	}
	l.applyLocked()
	l.mu.Unlock()
}

// Observe feeds the outcome of one attempt to the subscriber into the limit: its
// latency, its status (0: none, such as a connection refused) and whether it timed out,
// at now.
func (l *InFlight) Observe(latency time.Duration, status int, timedOut bool, now time.Time) {
	if !l.adaptive {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	x := float64(latency)
	if l.srtt == 0 {
		l.srtt = x
	} else {
		l.srtt += (x - l.srtt) * srttGain
	}
	if l.base == 0 || l.srtt < l.base {
		l.base = l.srtt
	} else {
		l.base += (l.srtt - l.base) * baselineDriftGain
	}
	congested := timedOut
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		congested = true
	}
	floor := 1.0
	if !congested && status != 0 && l.srtt > latencyFactor*l.base && l.srtt-l.base > float64(latencyMargin) {
		// A latency climb alone is an ambiguous signal: it cuts no lower than the climb
		// floor, and not at all while this process's own CPU is saturated.
		floor = l.climbFloor()
		congested = l.limit > floor && !l.cpu.Busy(now)
	}
	old := int(l.limit)
	if congested {
		window := max(time.Duration(l.srtt), minCutInterval)
		if now.Sub(l.lastCut) < window {
			return
		}
		l.lastCut = now
		l.limit = max(floor, l.limit*aimdDecrease)
	} else {
		l.limit = min(float64(l.max), l.limit+1/l.limit)
	}
	if int(l.limit) != old {
		l.applyLocked()
	}
}

// climbFloor is the lowest limit a latency climb alone may cut to: climbFloorShare of
// the maximum, at least 1. Latency also climbs when the subscriber or the broker shares
// a busy CPU with other work; more requests in flight then still deliver more, but
// every attempt stays slower than the best latency seen, so without a floor each window
// would cut again down to one attempt in flight, and delivery would fall to one event
// per round trip (docs/decisions/0001-latency-climb-floor.md). The explicit signals (429, 502, 503, 504, a
// timeout) still cut to 1.
func (l *InFlight) climbFloor() float64 { return max(1, float64(l.max)*climbFloorShare) }

func (l *InFlight) applyLocked() { l.apply(max(int(l.limit), 1)) }
