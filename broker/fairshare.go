package broker

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// admitRate takes n events from the broker's rate (sluice.dev/max-rate, an
// overload.Rate), or answers 429 with the time a retry would wait for them; 413 for
// more events than the bucket ever holds.
func (s *Server) admitRate(w http.ResponseWriter, b *Broker, n int) bool {
	rl := b.gate.Rate()
	if rl == nil {
		return true
	}
	ok, wait := rl.Take(n, time.Now())
	if ok {
		return true
	}
	if burst := rl.Burst(); n > burst {
		// No wait would let it in: the bucket never holds more than a second of events.
		s.metrics.rejected.WithLabelValues(b.key, "too_large").Inc()
		http.Error(w, "batch of "+strconv.Itoa(n)+" events is more than the rate limit of /"+b.key+" ("+strconv.FormatFloat(rl.PerSec(), 'g', -1, 64)+
			" events/s, sluice.dev/max-rate) ever lets in at once ("+strconv.Itoa(burst)+" events): send smaller batches", http.StatusRequestEntityTooLarge)
		return false
	}
	s.metrics.rejected.WithLabelValues(b.key, "rate").Inc()
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	http.Error(w, "rate limit of /"+b.key+" ("+strconv.FormatFloat(rl.PerSec(), 'g', -1, 64)+" events/s, sluice.dev/max-rate) reached: try again after Retry-After", http.StatusTooManyRequests)
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
	rl := b.gate.Rate()
	if rl == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, replyRateWait)
	defer cancel()
	if err := rl.Wait(wctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("rate limit of /%s (%s events/s, sluice.dev/max-rate) reached: no room for the reply within %v: %w",
			b.key, strconv.FormatFloat(rl.PerSec(), 'g', -1, 64), replyRateWait, err)
	}
	return nil
}
