package delivery

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestPacerBucket drives a delivery-rate cap's bucket with an injected clock: N attempts
// arriving in bursts and gaps each start when reserve says; between any two starts, the
// attempts started never exceed the burst plus the rate times the time between them, and
// attempts arriving all at once are spread out exactly as the bucket allows.
func TestPacerBucket(t *testing.T) {
	const n = 400
	base := time.Unix(1_000_000, 0)
	for _, perSec := range []float64{0.5, 3, 50, 1000} {
		for _, pattern := range []string{"at once", "bursts and gaps"} {
			t.Run(fmt.Sprintf("%g/s %s", perSec, pattern), func(t *testing.T) {
				p := newPacer(perSec)
				burst := paceBurst(perSec)
				if p.lim.Burst() != burst || burst < 1 || burst > max(1, int(perSec)) {
					t.Fatalf("burst %d (bucket %d) for %g/s: want a tenth of a second, at least 1", burst, p.lim.Burst(), perSec)
				}
				now := base
				starts := make([]time.Time, n)
				for i := range starts {
					if pattern != "at once" && i%17 == 0 { // a gap of 0 to 2 seconds of tokens
						now = now.Add(time.Duration(float64(i%3) * float64(time.Second)))
					}
					wait, rs := p.reserve(1, now)
					if len(rs) != 1 || wait < 0 {
						t.Fatalf("attempt %d: %d reservations, wait %v", i, len(rs), wait)
					}
					starts[i] = now.Add(wait)
				}
				// The bucket's bound between every pair of starts, with a nanosecond of
				// rounding per token.
				for i := range starts {
					for j := i; j < n; j++ {
						span := starts[j].Sub(starts[i])
						allowed := float64(burst) + perSec*(span.Seconds()+1e-9*float64(j-i+1))
						if got := float64(j - i + 1); got > allowed {
							t.Fatalf("attempts %d..%d: %v apart, %v started; the bucket allows %.3f", i, j, span, got, allowed)
						}
					}
				}
				if pattern == "at once" {
					// The first burst start at once, then one every 1/rate.
					want := time.Duration(float64(n-burst) / perSec * float64(time.Second))
					if got := starts[n-1].Sub(base); got < want-time.Millisecond || got > want+time.Millisecond {
						t.Fatalf("the last of %d attempts at once starts after %v, want %v", n, got, want)
					}
				}
			})
		}
	}
}

// TestPacerBatch: a batch takes one token per event, in chunks of at most the burst, so a
// batch larger than the bucket still goes, after the time its events take at the rate;
// tokens given back (giveBack) are there for the next attempt.
func TestPacerBatch(t *testing.T) {
	p := newPacer(50) // burst 5
	now := time.Unix(1_000_000, 0)
	wait, rs := p.reserve(25, now)
	if len(rs) != 5 || wait != 400*time.Millisecond {
		t.Fatalf("25 events at 50/s, burst 5: %d reservations, wait %v; want 5 and 400ms", len(rs), wait)
	}
	giveBack(rs, now)
	if wait, _ := p.reserve(5, now); wait != 0 {
		t.Fatalf("after giving the tokens back, 5 events wait %v; want none", wait)
	}
}

// TestDispatcherMaxDeliveryRate: under a low delivery-rate cap every event is delivered,
// retries included (each attempt takes a token), and none is released.
func TestDispatcherMaxDeliveryRate(t *testing.T) {
	const events = 20
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request, n int, _ *event.Event) {
		if n%4 == 0 { // some attempts fail: their retries take tokens too
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/rate", URL: srv.URL, MaxDeliveryRate: 50,
		Policy: Policy{Retry: 3, Delay: time.Millisecond}})
	run(t, d)
	pub(ids(events, "r")...)
	sluicetest.Eventually(t, 60*time.Second, "every event acked", func() bool { return q.acked.Load() == events })
	if q.released.Load() != 0 || int(srv.n.Load()) <= events {
		t.Fatalf("%d released, %d attempts; want 0 and more than %d (some retried)", q.released.Load(), srv.n.Load(), events)
	}
}

// TestDispatcherRateReload: attempts waiting for a token of a very low rate wait again
// under the new rate after Update, and every event is delivered.
func TestDispatcherRateReload(t *testing.T) {
	const events = 10
	srv := newServer(t, nil)
	q, pub := newQueue(t)
	tg := Target{Name: "ns/rate", URL: srv.URL, MaxDeliveryRate: 0.001} // one token, then one per 1000 s
	d := NewDispatcher(q, tg)
	run(t, d)
	pub(ids(events, "r")...)
	sluicetest.Eventually(t, 30*time.Second, "the first event acked", func() bool { return q.acked.Load() == 1 })
	if got := q.acked.Load(); got != 1 {
		t.Fatalf("%d acked under 0.001/s, want 1 (the burst)", got)
	}
	tg.MaxDeliveryRate = 1000
	d.Update(tg)
	sluicetest.Eventually(t, 30*time.Second, "every event acked", func() bool { return q.acked.Load() == events })
	tg.MaxDeliveryRate = 0 // the cap removed
	d.Update(tg)
	pub(ids(events, "s")...)
	sluicetest.Eventually(t, 30*time.Second, "every event acked", func() bool { return q.acked.Load() == 2*events })
	if q.released.Load() != 0 {
		t.Fatalf("%d released", q.released.Load())
	}
}

// TestDispatcherRateStop: a hard stop ends attempts waiting for a token; their messages
// are released, not lost silently.
func TestDispatcherRateStop(t *testing.T) {
	srv := newServer(t, nil)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/rate", URL: srv.URL, MaxDeliveryRate: 0.001})
	stop := run(t, d)
	pub(ids(3, "r")...)
	sluicetest.Eventually(t, 30*time.Second, "the first event acked", func() bool { return q.acked.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if left := d.Drain(ctx); left != 2 {
		t.Errorf("Drain left %d, want the 2 waiting for a token", left)
	}
	stop()
	if q.acked.Load() != 1 || q.released.Load() != 2 {
		t.Fatalf("%d acked, %d released; want 1 and 2", q.acked.Load(), q.released.Load())
	}
}

// TestTargetRateInvalid: a negative, NaN or infinite MaxDeliveryRate is an invalid target.
func TestTargetRateInvalid(t *testing.T) {
	for _, r := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := resolve(Target{URL: "http://127.0.0.1:1/", MaxDeliveryRate: r}, nil); err == nil {
			t.Errorf("rate %v: no error", r)
		}
	}
}
