package broker

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"
)

// rateLimit is a broker's ingress rate (the sluice.dev/max-rate annotation): a token
// bucket of MaxRate events a second that holds one second of them, so a namespace
// flooding its broker is answered 429 past its share while other brokers keep theirs.
type rateLimit struct {
	perSec  float64
	limiter *rate.Limiter
}

// setRate makes the broker's limit perSec events a second; 0 removes it. A limit that
// did not change keeps its bucket. Called by apply (under the server's applyMu).
func (b *Broker) setRate(perSec float64) {
	if old := b.rate.Load(); old != nil && old.perSec == perSec {
		return
	}
	if perSec <= 0 {
		b.rate.Store(nil)
		return
	}
	burst := max(1, int(perSec))
	b.rate.Store(&rateLimit{perSec: perSec, limiter: rate.NewLimiter(rate.Limit(perSec), burst)})
}

// admitRate takes n events from the broker's bucket, or answers 429 with the time a
// retry would wait for them; 413 for more events than the bucket ever holds.
func (s *Server) admitRate(w http.ResponseWriter, b *Broker, n int) bool {
	rl := b.rate.Load()
	if rl == nil {
		return true
	}
	now := time.Now()
	if rl.limiter.AllowN(now, n) {
		return true
	}
	if burst := rl.limiter.Burst(); n > burst {
		// No wait would let it in: the bucket never holds more than a second of events.
		s.metrics.rejected.WithLabelValues(b.key, "too_large").Inc()
		http.Error(w, "batch of "+strconv.Itoa(n)+" events is more than the rate limit of /"+b.key+" ("+strconv.FormatFloat(rl.perSec, 'g', -1, 64)+
			" events/s, sluice.dev/max-rate) ever lets in at once ("+strconv.Itoa(burst)+" events): send smaller batches", http.StatusRequestEntityTooLarge)
		return false
	}
	s.metrics.rejected.WithLabelValues(b.key, "rate").Inc()
	wait := time.Second
	if r := rl.limiter.ReserveN(now, n); r.OK() { // only to learn the delay; given back at once
		wait = max(time.Second, r.DelayFrom(now))
		r.CancelAt(now)
	}
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	http.Error(w, "rate limit of /"+b.key+" ("+strconv.FormatFloat(rl.perSec, 'g', -1, 64)+" events/s, sluice.dev/max-rate) reached: try again after Retry-After", http.StatusTooManyRequests)
	return false
}

// replyRateWait bounds how long a reply waits for a token of its broker's rate.
const replyRateWait = 10 * time.Second

// replyRate takes one event from the broker's bucket for a subscriber's reply, as the
// ingress does for an event sent from outside, so that replies cannot carry a namespace
// past its sluice.dev/max-rate. A reply waits for its token, in turn with the ingress,
// for up to replyRateWait; when the bucket would make it wait longer it waits not at all
// and the error fails the delivery, which is retried per its policy (then
// dead-lettered): nothing is lost.
func (b *Broker) replyRate(ctx context.Context) error {
	rl := b.rate.Load()
	if rl == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, replyRateWait)
	defer cancel()
	if err := rl.limiter.Wait(wctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("rate limit of /%s (%s events/s, sluice.dev/max-rate) reached: no room for the reply within %v: %w",
			b.key, strconv.FormatFloat(rl.perSec, 'g', -1, 64), replyRateWait, err)
	}
	return nil
}
