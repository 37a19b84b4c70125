package delivery

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// scalingSink imitates a Knative Service behind an activator while replicas come and
// go: for window after its first request it answers 503 to 30% of requests and is slow
// (5 ms), then it recovers (1 ms, always 202).
type scalingSink struct {
	*server
	start    sync.Once
	t0       time.Time
	rejected atomic.Int64
	accepted sync.Map // id → true
}

func newScalingSink(t *testing.T, window time.Duration) *scalingSink {
	s := &scalingSink{}
	s.server = newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, ev *event.Event) {
		s.start.Do(func() { s.t0 = time.Now() })
		if time.Since(s.t0) < window {
			time.Sleep(5 * time.Millisecond)
			if rand.IntN(10) < 3 {
				s.rejected.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		} else {
			time.Sleep(time.Millisecond)
		}
		s.accepted.Store(ev.ID, true)
		w.WriteHeader(http.StatusAccepted)
	})
	return s
}

// TestAdaptiveSink delivers the same backlog to two autoscaling sinks, with and without
// the adaptive limit: both get every event; the adaptive dispatcher makes the sink serve
// fewer 503s.
func TestAdaptiveSink(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 6 s")
	}
	const events = 5000
	var rejected [2]int64
	var minLimit [2]int
	var wg sync.WaitGroup
	for i, adaptive := range []bool{false, true} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sink := newScalingSink(t, 5*time.Second)
			q, pub := newQueue(t)
			d := NewDispatcher(q, Target{Name: "ns/scale", URL: sink.URL, MaxInFlight: 32,
				Policy: Policy{Retry: 30, Backoff: Linear, Delay: 10 * time.Millisecond}}, WithAdaptive(adaptive))
			run(t, d)
			pub(ids(events, "s")...)
			minLimit[i] = d.Limit()
			deadline := time.Now().Add(12 * time.Second)
			for q.acked.Load() < events && time.Now().Before(deadline) {
				minLimit[i] = min(minLimit[i], d.Limit())
				time.Sleep(time.Millisecond)
			}
			if a := q.acked.Load(); a != events {
				t.Errorf("adaptive=%v: %d of %d events acked", adaptive, a, events)
			}
			n := 0
			sink.accepted.Range(func(any, any) bool { n++; return true })
			if n != events {
				t.Errorf("adaptive=%v: sink accepted %d distinct events, want %d", adaptive, n, events)
			}
			rejected[i] = sink.rejected.Load()
		}()
	}
	wg.Wait()
	t.Logf("503s served: %d without adaptation, %d with (lowest limit %d vs %d)",
		rejected[0], rejected[1], minLimit[0], minLimit[1])
	if rejected[1] >= rejected[0] {
		t.Errorf("adaptation did not reduce 503s: %d with, %d without", rejected[1], rejected[0])
	}
}

func TestLimiterAIMD(t *testing.T) {
	g := NewMetrics(nil).forTrigger("x").limit
	l := newLimiter(32, true, g)
	now := time.Now()
	ms := time.Millisecond
	l.observe(ms, http.StatusServiceUnavailable, false, now)
	if got := l.current(); got != 16 {
		t.Fatalf("after a 503 limit = %d, want 16", got)
	}
	l.observe(ms, http.StatusServiceUnavailable, false, now.Add(ms))
	if got := l.current(); got != 16 {
		t.Fatalf("a second 503 within the window cut again: %d", got)
	}
	l.observe(ms, http.StatusTooManyRequests, false, now.Add(10*ms))
	if got := l.current(); got != 8 {
		t.Fatalf("after a 429 a window later limit = %d, want 8", got)
	}
	for range 9 { // about one window's worth of successes adds one
		l.observe(ms, http.StatusOK, false, now.Add(20*ms))
	}
	if got := l.current(); got != 9 {
		t.Fatalf("after 9 successes at limit 8, limit = %d, want 9", got)
	}
	l.observe(ms, http.StatusBadRequest, false, now.Add(30*ms))
	if got := l.current(); got != 9 {
		t.Errorf("a 400 changed the limit to %d", got)
	}
	for range 2000 {
		l.observe(ms, http.StatusOK, false, now.Add(40*ms))
	}
	if got := l.current(); got != 32 {
		t.Errorf("limit %d after recovery, want the maximum 32", got)
	}
	// A latency climb (1 ms → 20 ms) is a congestion signal.
	for range 50 {
		l.observe(20*ms, http.StatusOK, false, now.Add(time.Second))
	}
	if got := l.current(); got >= 32 {
		t.Errorf("latency climb did not cut the limit: %d", got)
	}
	// A climb alone never cuts below the climb floor (32/8 = 4), however long it lasts.
	for i := range 100 {
		l.observe(20*ms, http.StatusOK, false, now.Add(time.Second+time.Duration(i)*time.Second))
	}
	if got := l.current(); got != 4 {
		t.Errorf("after a long latency climb limit = %d, want the climb floor 4", got)
	}
	// The explicit signals still cut to 1.
	for i := range 10 {
		l.observe(ms, http.StatusServiceUnavailable, false, now.Add(time.Hour+time.Duration(i)*time.Second))
	}
	if got := l.current(); got != 1 {
		t.Errorf("after repeated 503s limit = %d, want 1", got)
	}
	fixed := newLimiter(32, false, g)
	fixed.observe(ms, http.StatusServiceUnavailable, false, now)
	if got := fixed.current(); got != 32 {
		t.Errorf("non-adaptive limit moved to %d", got)
	}
}
