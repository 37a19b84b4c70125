package delivery

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/overload"
)

// limiter bounds the attempts in flight toward one subscriber: a semaphore whose limit
// is overload.InFlight's, the adaptive (AIMD) in-flight limit (or MaxInFlight, fixed),
// shown in the trigger's gauge sluice_delivery_inflight_limit. Safe for concurrent use.
type limiter struct {
	sem  *semaphore
	aimd *overload.InFlight
}

func newLimiter(maxInFlight int, adaptive bool, gauge prometheus.Gauge) *limiter {
	sem := newSemaphore(maxInFlight)
	gauge.Set(float64(maxInFlight))
	return &limiter{sem: sem, aimd: overload.NewInFlight(maxInFlight, adaptive, func(n int) {
		sem.setLimit(n)
		gauge.Set(float64(n))
	})}
}

func (l *limiter) acquire(ctx context.Context) error { return l.sem.acquire(ctx) }
func (l *limiter) release()                          { l.sem.release() }

// current returns the effective limit.
func (l *limiter) current() int { return l.aimd.Current() }

// setMax applies a new MaxInFlight (config reload).
func (l *limiter) setMax(m int) { l.aimd.SetMax(m) }

// observe feeds the outcome of one attempt to the subscriber into the limit.
func (l *limiter) observe(latency time.Duration, status int, timedOut bool, now time.Time) {
	l.aimd.Observe(latency, status, timedOut, now)
}
