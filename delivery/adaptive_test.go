package delivery

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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

// TestLimiterApplies: the limiter's semaphore and gauge follow overload.InFlight's
// limit (its rules are overload's TestInFlightAIMD).
func TestLimiterApplies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		adaptive bool
		want     int // after a 503
	}{
		{"adaptive", true, 16},
		{"fixed", false, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewMetrics(nil).forTrigger("x").limit
			l := newLimiter(32, tc.adaptive, g)
			if got := testutil.ToFloat64(g); got != 32 {
				t.Fatalf("gauge %v at start, want 32", got)
			}
			l.observe(time.Millisecond, http.StatusServiceUnavailable, false, time.Now())
			if got := l.current(); got != tc.want {
				t.Fatalf("after a 503 limit = %d, want %d", got, tc.want)
			}
			l.sem.mu.Lock()
			sem := l.sem.limit
			l.sem.mu.Unlock()
			if got := testutil.ToFloat64(g); got != float64(tc.want) || sem != tc.want {
				t.Errorf("after a 503: gauge %v, semaphore %d; want %d", got, sem, tc.want)
			}
			l.setMax(8)
			if got := testutil.ToFloat64(g); got != 8 || l.current() != 8 {
				t.Errorf("after setMax(8): gauge %v, limit %d; want 8", got, l.current())
			}
		})
	}
}
