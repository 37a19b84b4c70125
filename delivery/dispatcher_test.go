package delivery

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

func TestRetriesThenDelivered(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, n int, _ *event.Event) {
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	dls := newServer(t, nil)
	q, pub := newQueue(t)
	m := NewMetrics(prometheus.NewRegistry())
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
		Policy: Policy{Retry: 5, Delay: 10 * time.Millisecond, DeadLetterSink: dls.URL}}, WithMetrics(m))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	time.Sleep(50 * time.Millisecond) // room for a wrong extra attempt
	if n := sub.n.Load(); n != 3 {
		t.Errorf("subscriber saw %d attempts, want 3", n)
	}
	if n := dls.n.Load(); n != 0 {
		t.Errorf("dead-letter sink saw %d events, want 0", n)
	}
	if v := value(m.delivered.WithLabelValues("ns/t")); v != 1 {
		t.Errorf("delivered_total = %v, want 1", v)
	}
	if v := value(m.retries.WithLabelValues("ns/t")); v != 2 {
		t.Errorf("retries_total = %v, want 2", v)
	}
	if v := value(m.attempts.WithLabelValues("ns/t", "subscriber", "5xx")); v != 2 {
		t.Errorf("attempts_total{5xx} = %v, want 2", v)
	}
}

func TestBinaryModeUnchanged(t *testing.T) {
	sub := newServer(t, nil)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL})
	run(t, d)
	e := &event.Event{SpecVersion: "1.0", ID: "x1", Source: "https://example.com/a b", Type: "t.ü",
		Subject: "s", Time: "2024-01-02T03:04:05Z", DataSchema: "https://example.com/schema",
		DataContentType: "application/octet-stream", Data: []byte{0, 1, 2, 255, '%'},
		Extensions: []event.Extension{{Name: "partitionkey", Value: "k 1%"}, {Name: "knativebrokerttl", Value: "9"}, {Name: "zzz", Value: "\"q\""}}}
	pub(e)
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	got := sub.received()[0]
	want := e.Clone()
	want.Delete(ExtTTL) // stripped before subscribers, as Knative does
	if !sameEvent(got.ev, want) {
		t.Errorf("subscriber got %+v\nwant %+v", got.ev, want)
	}
	if got.h.Get("Prefer") != "reply" {
		t.Errorf("Prefer = %q, want reply", got.h.Get("Prefer"))
	}
}

func sameEvent(a, b *event.Event) bool {
	if a.SpecVersion != b.SpecVersion || a.ID != b.ID || a.Source != b.Source || a.Type != b.Type ||
		a.Subject != b.Subject || a.Time != b.Time || a.DataSchema != b.DataSchema ||
		a.DataContentType != b.DataContentType || string(a.Data) != string(b.Data) || len(a.Extensions) != len(b.Extensions) {
		return false
	}
	for _, x := range b.Extensions {
		if v, ok := a.Get(x.Name); !ok || v != x.Value {
			return false
		}
	}
	return true
}

func TestNotRetriedGoesToDeadLetter(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte("field x is missing"))
	})
	dls := newServer(t, nil)
	q, pub := newQueue(t)
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
		Policy: Policy{Retry: 5, Delay: 10 * time.Millisecond, DeadLetterSink: dls.URL}}, WithMetrics(m))
	run(t, d)
	pub(newEvent("e1", ExtTTL, "200", "custom", "v"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := sub.n.Load(); n != 1 {
		t.Errorf("subscriber saw %d attempts, want 1", n)
	}
	got := dls.received()
	if len(got) != 1 {
		t.Fatalf("dead-letter sink got %d events, want 1", len(got))
	}
	ev := got[0].ev
	for name, want := range map[string]string{
		ExtErrorDest: sub.URL,
		ExtErrorCode: "400",
		ExtErrorData: base64.StdEncoding.EncodeToString([]byte("field x is missing")),
		"custom":     "v",
	} {
		if v, _ := ev.Get(name); v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	if ev.ID != "e1" || string(ev.Data) != `{"n":"e1"}` {
		t.Errorf("dead-lettered event id %q data %q changed", ev.ID, ev.Data)
	}
	if v := value(m.deadLettered.WithLabelValues("ns/t")); v != 1 {
		t.Errorf("dead_lettered_total = %v, want 1", v)
	}
}

// TestRetrySpacing measures the gaps between attempts against the pinned formula.
func TestRetrySpacing(t *testing.T) {
	const delay = 40 * time.Millisecond
	for _, b := range []BackoffPolicy{Linear, Exponential} {
		t.Run(b.String(), func(t *testing.T) {
			t.Parallel()
			sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte(strings.Repeat("x", 3000))) // longer than knativeerrordata keeps
			})
			dls := newServer(t, nil)
			q, pub := newQueue(t)
			p := Policy{Retry: 3, Backoff: b, Delay: delay, DeadLetterSink: dls.URL}
			d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, Policy: p})
			run(t, d)
			pub(newEvent("e1"))
			sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
			got := sub.received()
			if len(got) != 4 {
				t.Fatalf("subscriber saw %d attempts, want 4", len(got))
			}
			for n := 1; n < len(got); n++ {
				gap := got[n].at.Sub(got[n-1].at)
				want := p.Wait(n, nil)
				// The policy's wait is a floor (less 20% of jitter); a loaded machine may add any
				// amount to it, so the ceiling only bounds a hang.
				lo, hi := time.Duration(float64(want)*0.8)-2*time.Millisecond, want+10*time.Second
				t.Logf("retry %d: waited %v (policy %v)", n, gap.Round(time.Millisecond), want)
				if gap < lo || gap > hi {
					t.Errorf("retry %d waited %v, want within [%v, %v]", n, gap, lo, hi)
				}
			}
			dl := dls.received()
			if len(dl) != 1 {
				t.Fatalf("dead-letter sink got %d events, want 1", len(dl))
			}
			if v, _ := dl[0].ev.Get(ExtErrorCode); v != "500" {
				t.Errorf("knativeerrorcode = %q, want 500", v)
			}
			data, _ := dl[0].ev.Get(ExtErrorData)
			if raw, err := base64.StdEncoding.DecodeString(data); err != nil || len(raw) != 1024 {
				t.Errorf("knativeerrordata decodes to %d bytes (%v), want 1024", len(raw), err)
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, n int, _ *event.Event) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, Policy: Policy{Retry: 2, Delay: 10 * time.Millisecond}})
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	got := sub.received()
	if len(got) != 2 {
		t.Fatalf("subscriber saw %d attempts, want 2", len(got))
	}
	if gap := got[1].at.Sub(got[0].at); gap < time.Second || gap > 10*time.Second { // the ceiling bounds a hang
		t.Errorf("retry after Retry-After: 1 came %v later, want at least 1s (its 10 ms delay ignored)", gap)
	}
}

func TestTimeoutRetried(t *testing.T) {
	t.Run("slow then fast", func(t *testing.T) {
		// The first two attempts would take a minute each: the ack within 30 s shows they
		// timed out, whatever the machine's load.
		sub := newServer(t, func(w http.ResponseWriter, r *http.Request, n int, _ *event.Event) {
			if n <= 2 {
				select {
				case <-time.After(time.Minute):
				case <-r.Context().Done():
				}
			}
			w.WriteHeader(http.StatusAccepted)
		})
		q, pub := newQueue(t)
		m := NewMetrics(nil)
		d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
			Policy: Policy{Retry: 3, Delay: 10 * time.Millisecond, Timeout: 50 * time.Millisecond}}, WithMetrics(m))
		run(t, d)
		pub(newEvent("e1"))
		sluicetest.Eventually(t, 30*time.Second, "ack (attempts that did not time out at 50ms)", func() bool { return q.acked.Load() == 1 })
		if v := value(m.attempts.WithLabelValues("ns/t", "subscriber", "timeout")); v != 2 {
			t.Errorf("attempts_total{timeout} = %v, want 2", v)
		}
		if v := value(m.delivered.WithLabelValues("ns/t")); v != 1 {
			t.Errorf("delivered_total = %v, want 1", v)
		}
	})
	t.Run("always slow", func(t *testing.T) {
		sub := newServer(t, func(w http.ResponseWriter, r *http.Request, n int, _ *event.Event) {
			select {
			case <-time.After(time.Second):
			case <-r.Context().Done():
			}
		})
		dls := newServer(t, nil)
		q, pub := newQueue(t)
		d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
			Policy: Policy{Retry: 1, Delay: 10 * time.Millisecond, Timeout: 30 * time.Millisecond, DeadLetterSink: dls.URL}})
		run(t, d)
		pub(newEvent("e1"))
		sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
		dl := dls.received()
		if len(dl) != 1 {
			t.Fatalf("dead-letter sink got %d events, want 1", len(dl))
		}
		code, _ := dl[0].ev.Get(ExtErrorCode)
		data, _ := dl[0].ev.Get(ExtErrorData)
		raw, _ := base64.StdEncoding.DecodeString(data)
		if code != "500" || !strings.HasPrefix(string(raw), "dispatch error: ") {
			t.Errorf("timeout dead-lettered with code %q data %q, want 500 and a dispatch error", code, raw)
		}
	})
}

func TestUndeliverableCounted(t *testing.T) {
	fail := func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		w.WriteHeader(http.StatusBadRequest)
	}
	tests := []struct {
		name   string
		sink   func(t *testing.T) string
		reason string
	}{
		{"no sink", func(*testing.T) string { return "" }, "no_sink"},
		{"sink fails", func(t *testing.T) string {
			return newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
				w.WriteHeader(http.StatusServiceUnavailable)
			}).URL
		}, "sink_failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub := newServer(t, fail)
			q, pub := newQueue(t)
			m := NewMetrics(nil)
			var logs strings.Builder
			d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
				Policy: Policy{Retry: 2, Delay: 5 * time.Millisecond, DeadLetterSink: tc.sink(t)}},
				WithMetrics(m), WithLogger(testLogger(&logs)))
			run(t, d)
			pub(newEvent("lost-1"))
			sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
			if v := value(m.undeliverable.WithLabelValues("ns/t", tc.reason)); v != 1 {
				t.Errorf("undeliverable_total{%s} = %v, want 1", tc.reason, v)
			}
			if !strings.Contains(logs.String(), "lost-1") {
				t.Errorf("the undeliverable event's id is not in the log:\n%s", logs.String())
			}
		})
	}
}

func TestDrain(t *testing.T) {
	t.Run("delivers everything", func(t *testing.T) {
		var n atomic.Int64
		sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
			if n.Add(1)%3 == 0 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		})
		q, pub := newQueue(t)
		d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, MaxInFlight: 4,
			Policy: Policy{Retry: 10, Delay: 5 * time.Millisecond}})
		run(t, d)
		pub(ids(200, "d")...)
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		if left := d.Drain(ctx); left != 0 {
			t.Errorf("Drain left %d, want 0", left)
		}
		if a := q.acked.Load(); a != 200 {
			t.Errorf("acked %d, want 200", a)
		}
	})
	t.Run("deadline releases", func(t *testing.T) {
		sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		q, pub := newQueue(t)
		m := NewMetrics(nil)
		d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, MaxInFlight: 4,
			Policy: Policy{Retry: 100, Delay: 20 * time.Millisecond}}, WithMaxPending(6), WithMetrics(m))
		run(t, d)
		pub(ids(30, "r")...)
		sluicetest.Eventually(t, 30*time.Second, "retries", func() bool { return sub.n.Load() >= 10 })
		ctx, cancel := contextWithTimeout(100 * time.Millisecond)
		defer cancel()
		left := d.Drain(ctx)
		if left != 10 { // the dispatcher holds MaxInFlight + MaxPending
			t.Errorf("Drain left %d, want 10 (the held bound)", left)
		}
		if r := q.released.Load(); r != int64(left) || q.acked.Load() != 0 {
			t.Errorf("released %d acked %d, want %d and 0", r, q.acked.Load(), left)
		}
		if v := value(m.released.WithLabelValues("ns/t", "false")); v != float64(left) {
			t.Errorf("released_total{redelivered=false} = %v, want %d", v, left)
		}
		if l := q.Len(); l != 20 {
			t.Errorf("%d events still queued, want 20 (never received)", l)
		}
	})
}

func TestUpdateTakesEffect(t *testing.T) {
	var gotNew atomic.Int64
	old := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	nu := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		gotNew.Add(1)
		w.WriteHeader(http.StatusAccepted)
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: old.URL, Policy: Policy{Retry: 50, Delay: 10 * time.Millisecond}})
	run(t, d)
	pub(ids(20, "u")...)
	sluicetest.Eventually(t, 30*time.Second, "first attempts", func() bool { return old.n.Load() >= 20 })
	d.Update(Target{Name: "ns/t", URL: nu.URL, MaxInFlight: 8, Policy: Policy{Retry: 50, Delay: 10 * time.Millisecond}})
	sluicetest.Eventually(t, 5*time.Second, "acks", func() bool { return q.acked.Load() == 20 })
	if gotNew.Load() != 20 {
		t.Errorf("new URL got %d, want 20", gotNew.Load())
	}
	if got := d.Limit(); got > 8 {
		t.Errorf("limit %d after MaxInFlight 8", got)
	}
	seen := map[string]bool{}
	for _, r := range nu.received() {
		seen[r.ev.ID] = true
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) != 20 {
		t.Errorf("new URL saw ids %v, want 20 distinct", keys)
	}
}

func TestNetworkErrorRetriedThenDeadLettered(t *testing.T) {
	gone := newServer(t, nil)
	url := gone.URL
	gone.Close() // connection refused from now on
	dls := newServer(t, nil)
	q, pub := newQueue(t)
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: url,
		Policy: Policy{Retry: 2, Delay: 5 * time.Millisecond, DeadLetterSink: dls.URL}}, WithMetrics(m))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	if v := value(m.attempts.WithLabelValues("ns/t", "subscriber", "error")); v != 3 {
		t.Errorf("attempts_total{error} = %v, want 3", v)
	}
	dl := dls.received()
	if len(dl) != 1 {
		t.Fatalf("dead-letter sink got %d events, want 1", len(dl))
	}
	if code, _ := dl[0].ev.Get(ExtErrorCode); code != "500" {
		t.Errorf("knativeerrorcode = %q, want 500", code)
	}
	if dest, _ := dl[0].ev.Get(ExtErrorDest); dest != url {
		t.Errorf("knativeerrordest = %q, want %q", dest, url)
	}
}

// TestDrainLeavesNoGoroutine drains a dispatcher with deliveries in flight, retries on
// timers and ordered keys, both to completion and at a deadline: Drain returns only once
// Run has, and Run only once every worker has, so nothing is left running.
func TestDrainLeavesNoGoroutine(t *testing.T) {
	for _, deadline := range []time.Duration{5 * time.Second, 50 * time.Millisecond} {
		t.Run(deadline.String(), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var n atomic.Int64
			hang := deadline < time.Second
			sub := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int, _ *event.Event) {
				if hang {
					<-r.Context().Done()
					return
				}
				if n.Add(1)%4 == 0 {
					w.WriteHeader(http.StatusServiceUnavailable) // retried on a timer
					return
				}
				w.WriteHeader(http.StatusAccepted)
			})
			defer sub.Close()
			q, pub := newQueue(t)
			d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, MaxInFlight: 8, Ordered: true,
				Policy: Policy{Retry: 5, Delay: 10 * time.Millisecond}}, WithMaxPending(16),
				WithLogger(slog.New(slog.DiscardHandler)))
			stop := run(t, d)
			evs := ids(100, "g")
			for i, e := range evs {
				e.Set(ExtPartitionKey, fmt.Sprint(i%10))
			}
			pub(evs...)
			ctx, cancel := contextWithTimeout(deadline)
			defer cancel()
			left := d.Drain(ctx)
			// At once, not eventually: Drain returned, so Run and every worker have.
			buf := make([]byte, 1<<20)
			if st := buf[:runtime.Stack(buf, true)]; bytes.Contains(st, []byte("delivery.(*Dispatcher)")) {
				t.Errorf("a dispatcher goroutine outlives Drain:\n%s", st)
			}
			if got := q.acked.Load() + q.released.Load(); got+int64(q.Len()) != 100 || int64(left) != q.released.Load() {
				t.Errorf("acked %d released %d queued %d, Drain left %d: want all 100 accounted for and left = released",
					q.acked.Load(), q.released.Load(), q.Len(), left)
			}
			if !hang && left != 0 {
				t.Errorf("Drain left %d with a healthy subscriber", left)
			}
			stop() // Run has returned already: this only collects its error
		})
	}
}

func TestTally(t *testing.T) {
	var tl tally
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !isClosed(tl.idle()) {
		t.Fatal("a new tally is not idle")
	}
	tl.add()
	tl.add()
	w := tl.idle()
	if isClosed(w) {
		t.Fatal("idle with 2 held")
	}
	tl.done()
	if isClosed(w) {
		t.Fatal("idle with 1 held")
	}
	tl.done()
	if !isClosed(w) {
		t.Fatal("not idle once all were done")
	}
	tl.add() // again: a fresh wait
	w2 := tl.idle()
	if isClosed(w2) {
		t.Fatal("idle with 1 held after reuse")
	}
	var wg sync.WaitGroup
	for range 100 {
		tl.add()
		wg.Go(tl.done)
	}
	tl.done()
	wg.Wait()
	select {
	case <-w2:
	case <-time.After(20 * time.Second): // bounds a hang
		t.Fatal("waiter not woken after concurrent dones")
	}
}
