package overload

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a broker's ingress rate (the sluice.dev/max-rate annotation): a token bucket
// of PerSec events a second that holds one second of them, so a namespace flooding its
// broker is refused past its share while other brokers keep theirs. Safe for
// concurrent use.
type Rate struct {
	perSec  float64
	limiter *rate.Limiter
}

// NewRate returns a bucket of perSec (> 0) events a second, holding one second of them
// (at least one event).
func NewRate(perSec float64) *Rate {
	burst := max(1, int(perSec))
	return &Rate{perSec: perSec, limiter: rate.NewLimiter(rate.Limit(perSec), burst)}
}

// PerSec is the rate, in events a second.
func (r *Rate) PerSec() float64 { return r.perSec }

// Burst is the most events the bucket ever holds: a batch of more can never be taken.
func (r *Rate) Burst() int { return r.limiter.Burst() }

// Take takes n events from the bucket at now. When they are not there it takes none
// and returns the time a retry would wait for them, at least a second; for more than
// Burst, no wait would do (and retry is 0).
func (r *Rate) Take(n int, now time.Time) (ok bool, retry time.Duration) {
	if r.limiter.AllowN(now, n) {
		return true, 0
	}
	if n > r.limiter.Burst() {
		return false, 0
	}
	retry = time.Second
	if res := r.limiter.ReserveN(now, n); res.OK() { // only to learn the delay; given back at once
		retry = max(time.Second, res.DelayFrom(now))
		res.CancelAt(now)
	}
	return false, retry
}

// Wait takes one event from the bucket, waiting for it in turn with Take until ctx
// ends; it fails at once when ctx would end before the event could be taken.
func (r *Rate) Wait(ctx context.Context) error { return r.limiter.Wait(ctx) }
