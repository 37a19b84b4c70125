package delivery

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestDeadLettererStoresInsteadOfPosting: with a DeadLetterer, a failed event is handed
// to it (with the error extensions) rather than POSTed to the sink, retried with the
// policy while it fails, and the original is acked only once it succeeded.
func TestDeadLettererStoresInsteadOfPosting(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		w.WriteHeader(http.StatusBadRequest)
	})
	sink := newServer(t, nil)
	var mu sync.Mutex
	var stored []*event.Event
	calls := 0
	dl := func(_ context.Context, e *event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			return errors.New("backend unavailable")
		}
		stored = append(stored, e)
		return nil
	}
	q, pub := newQueue(t)
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
		Policy: Policy{Retry: 3, Delay: 5 * time.Millisecond, DeadLetterSink: sink.URL}},
		WithMetrics(m), WithDeadLetterer(dl))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 || len(stored) != 1 {
		t.Fatalf("DeadLetterer called %d times, stored %d; want 3 and 1", calls, len(stored))
	}
	if code, _ := stored[0].Get(ExtErrorCode); code != "400" || stored[0].ID != "e1" {
		t.Errorf("stored %s with knativeerrorcode %q", stored[0].ID, code)
	}
	if n := sink.n.Load(); n != 0 {
		t.Errorf("the sink was POSTed %d times; the DeadLetterer should have taken the event", n)
	}
	if v := value(m.deadLettered.WithLabelValues("ns/t")); v != 1 {
		t.Errorf("dead_lettered_total = %v, want 1", v)
	}
}

// TestDeadLettererFailingIsUndeliverable: a DeadLetterer that never succeeds leaves the
// event undeliverable after the policy's attempts — counted, and the message settled.
func TestDeadLettererFailingIsUndeliverable(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		w.WriteHeader(http.StatusBadRequest)
	})
	q, pub := newQueue(t)
	m := NewMetrics(nil)
	var calls int
	var mu sync.Mutex
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL,
		Policy: Policy{Retry: 2, Delay: 5 * time.Millisecond, DeadLetterSink: "http://127.0.0.1:1/"}},
		WithMetrics(m), WithDeadLetterer(func(context.Context, *event.Event) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return errors.New("disk full")
		}))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Errorf("DeadLetterer called %d times, want 3 (retry: 2)", calls)
	}
	if v := value(m.undeliverable.WithLabelValues("ns/t", "sink_failed")); v != 1 {
		t.Errorf("undeliverable{sink_failed} = %v, want 1", v)
	}
}
