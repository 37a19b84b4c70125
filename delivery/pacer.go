package delivery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// paceBurstShare is the burst of a delivery-rate cap, in seconds of its rate: the bucket
// holds a tenth of a second of attempts (at least one), so a trigger idle for a while
// starts at most that many attempts at once before settling to its rate.
const paceBurstShare = 0.1

// paceBurst is the bucket size of a delivery-rate cap of perSec attempts a second.
func paceBurst(perSec float64) int { return max(1, int(perSec*paceBurstShare)) }

// errPaceChanged is what pacer.take returns when a reload replaced the pacer while it
// waited: the caller waits again on the new one.
var errPaceChanged = errors.New("delivery: the delivery-rate cap changed")

// pacer is a trigger's delivery-rate cap (Target.MaxDeliveryRate): a token bucket of
// perSec tokens a second holding paceBurst(perSec). Every attempt to the subscriber takes
// one token per event before it starts (retries included), so over any span of T
// seconds at most paceBurst + perSec·T attempts start. Safe for concurrent use.
type pacer struct {
	perSec  float64
	lim     *rate.Limiter
	changed chan struct{} // closed when a reload replaces this pacer
}

func newPacer(perSec float64) *pacer {
	return &pacer{perSec: perSec, lim: rate.NewLimiter(rate.Limit(perSec), paceBurst(perSec)), changed: make(chan struct{})}
}

// reserve takes n tokens at now, in chunks of at most the burst, and returns how long
// the caller must wait before it starts and the reservations (to give back with
// giveBack if it does not start).
func (p *pacer) reserve(n int, now time.Time) (time.Duration, []*rate.Reservation) {
	burst := p.lim.Burst()
	rs := make([]*rate.Reservation, 0, (n+burst-1)/burst)
	var wait time.Duration
	for n > 0 {
		k := min(n, burst)
		r := p.lim.ReserveN(now, k) // k ≤ burst and the limit finite: always OK
		rs = append(rs, r)
		wait = max(wait, r.DelayFrom(now))
		n -= k
	}
	return wait, rs
}

// take waits until n attempts may start. It returns ctx's error if ctx ends first and
// errPaceChanged if a reload replaced the pacer first; either way it gives its tokens
// back.
func (p *pacer) take(ctx context.Context, n int) error {
	now := time.Now()
	if n <= p.lim.Burst() && p.lim.AllowN(now, n) { // the tokens are there: no reservation to keep
		return nil
	}
	wait, rs := p.reserve(n, now)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-p.changed:
		err = errPaceChanged
	}
	giveBack(rs, time.Now())
	return err
}

// giveBack cancels the reservations rs, latest first: a reservation gives its tokens
// back in full only when none was made after it.
func giveBack(rs []*rate.Reservation, now time.Time) {
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].CancelAt(now)
	}
}

// validRate checks a Target.MaxDeliveryRate: 0 (no cap) or a positive finite number.
func validRate(perSec float64) error {
	if perSec < 0 || math.IsNaN(perSec) || math.IsInf(perSec, 0) {
		return fmt.Errorf("delivery: max delivery rate %v: want 0 (no cap) or a positive number of events a second", perSec)
	}
	return nil
}

// setRate applies a Target.MaxDeliveryRate: a new bucket when it changed (attempts
// waiting on the old one wait again on the new), none when 0. Called with d.mu held or
// before Run.
func (d *Dispatcher) setRate(perSec float64) {
	old := d.pace.Load()
	if old == nil && perSec == 0 || old != nil && old.perSec == perSec {
		return
	}
	var p *pacer
	if perSec > 0 {
		p = newPacer(perSec)
	}
	d.pace.Store(p)
	if old != nil {
		close(old.changed)
	}
}

// paced waits for n tokens of the target's delivery-rate cap, if it has one, until ctx
// ends.
func (d *Dispatcher) paced(ctx context.Context, n int) error {
	for {
		p := d.pace.Load()
		if p == nil {
			return nil
		}
		if err := p.take(ctx, n); !errors.Is(err, errPaceChanged) {
			return err
		}
	}
}
