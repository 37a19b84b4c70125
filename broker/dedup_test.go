package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/event"
)

// countingSubscriber counts the events delivered to it (a batch counts each event).
func countingSubscriber(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(sub.Close)
	return sub, &n
}

// dedupBroker is broker ns/b with sluice.dev/dedup-window: window ("" : none), and one
// trigger of every event of type t delivering to url.
func dedupBroker(window, url string) string {
	meta := ""
	if window != "" {
		meta = `, annotations: {sluice.dev/dedup-window: "` + window + `"}`
	}
	return fmt.Sprintf(brokerDoc, meta) + triggerDoc("all", "t", url)
}

// shutdown shuts s down, delivering everything queued, so that a subscriber's count is
// final afterwards.
func shutdown(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if lost := s.Shutdown(ctx); lost != 0 {
		t.Fatalf("shutdown lost %d deliveries", lost)
	}
}

func batchOf(evs ...[2]string) string {
	var parts []string
	for _, e := range evs {
		parts = append(parts, `{"specversion":"1.0","id":"`+e[1]+`","source":"`+e[0]+`","type":"t"}`)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestIngressDedup: with sluice.dev/dedup-window, an event whose (source, id) the
// broker accepted within the window is answered 202 and not stored again, counted in
// sluice_events_deduplicated_total; in a batch each event counts on its own; without
// the annotation (or with 0) every copy is stored.
func TestIngressDedup(t *testing.T) {
	batch := map[string]string{"Content-Type": "application/cloudevents-batch+json"}
	tests := []struct {
		name      string
		window    string
		requests  []func(h http.Handler) *httptest.ResponseRecorder
		delivered int64
		dedup     float64
	}{
		{"twice within the window", "1h", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
		}, 1, 1},
		{"same id, other source", "1h", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
			func(h http.Handler) *httptest.ResponseRecorder {
				return post(h, "POST", "/ns/b", binary("a", "Ce-Source", "/other"), "{}")
			},
		}, 2, 0},
		{"source and id do not trade characters", "1h", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder {
				return post(h, "POST", "/ns/b", batch, batchOf([2]string{"/ab", "c"}))
			},
			func(h http.Handler) *httptest.ResponseRecorder {
				return post(h, "POST", "/ns/b", batch, batchOf([2]string{"/a", "bc"}))
			},
		}, 2, 0},
		{"in a batch, per event", "1h", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
			func(h http.Handler) *httptest.ResponseRecorder {
				return post(h, "POST", "/ns/b", batch, batchOf([2]string{"/test", "a"}, [2]string{"/test", "b"}, [2]string{"/test", "b"}, [2]string{"/test", "c"}))
			},
		}, 3, 2},
		{"a batch of duplicates only", "PT1H", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
			func(h http.Handler) *httptest.ResponseRecorder {
				return post(h, "POST", "/ns/b", batch, batchOf([2]string{"/test", "a"}, [2]string{"/test", "a"}))
			},
		}, 1, 2},
		{"off", "", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
		}, 2, 0},
		{"zero", "0", []func(h http.Handler) *httptest.ResponseRecorder{
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
			func(h http.Handler) *httptest.ResponseRecorder { return post(h, "POST", "/ns/b", binary("a"), "{}") },
		}, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, n := countingSubscriber(t)
			reg := prometheus.NewRegistry()
			s := newTestServer(t, nil, WithRegisterer(reg))
			if err := s.Apply(context.Background(), loadConfig(t, dedupBroker(tt.window, sub.URL))); err != nil {
				t.Fatal(err)
			}
			h := s.Handler()
			for i, req := range tt.requests {
				if rec := req(h); rec.Code != http.StatusAccepted {
					t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
				}
			}
			shutdown(t, s)
			if got := n.Load(); got != tt.delivered {
				t.Errorf("delivered %d events, want %d", got, tt.delivered)
			}
			if got := counterSum(t, reg, "sluice_events_deduplicated_total"); got != tt.dedup {
				t.Errorf("sluice_events_deduplicated_total %v, want %v", got, tt.dedup)
			}
			if got := counterSum(t, reg, "sluice_events_accepted_total"); got != float64(tt.delivered) {
				t.Errorf("sluice_events_accepted_total %v, want %d (the events stored)", got, tt.delivered)
			}
		})
	}
}

// TestIngressDedupBound: a broker's window remembers at most WithDedupEntries pairs:
// with 3, a fourth distinct event makes it forget the oldest early (counted in
// sluice_dedup_evicted_total), whose duplicate is then stored again, while the newest's
// duplicate is still dropped.
func TestIngressDedupBound(t *testing.T) {
	sub, n := countingSubscriber(t)
	reg := prometheus.NewRegistry()
	s := newTestServer(t, nil, WithRegisterer(reg), WithDedupEntries(3))
	if err := s.Apply(context.Background(), loadConfig(t, dedupBroker("1h", sub.URL))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, id := range []string{"1", "2", "3", "4", "4", "1"} {
		if rec := post(h, "POST", "/ns/b", binary(id), "{}"); rec.Code != http.StatusAccepted {
			t.Fatalf("event %s: %d %s", id, rec.Code, rec.Body)
		}
	}
	if got := counterSum(t, reg, "sluice_dedup_evicted_total"); got != 2 {
		// 4 forgot 1; the second 1, stored again, forgot 2.
		t.Errorf("sluice_dedup_evicted_total %v, want 2", got)
	}
	if got := s.lookup("ns/b").dedup.Load().len(); got != 3 {
		t.Errorf("%d pairs remembered, want the bound, 3", got)
	}
	shutdown(t, s)
	if got := n.Load(); got != 5 {
		t.Errorf("delivered %d events, want 5 (1, 2, 3, 4 and 1 again)", got)
	}
	if got := counterSum(t, reg, "sluice_events_deduplicated_total"); got != 1 {
		t.Errorf("sluice_events_deduplicated_total %v, want 1 (the second 4)", got)
	}
}

// TestDedupWindowExpiry: a pair is forgotten once its window has passed, and a reload
// that turns the window off forgets every pair. The clock is passed in, not waited for.
func TestDedupWindowExpiry(t *testing.T) {
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "evicted"})
	w := newDedupWindow(time.Minute, 10, evicted)
	ev := func(id string) *event.Event { return &event.Event{ID: id, Source: "/s", Type: "t", SpecVersion: "1.0"} }
	kept, keys := w.filter([]*event.Event{ev("a"), ev("b")}, nil, time.Now())
	if len(kept) != 2 {
		t.Fatalf("kept %d of two new events", len(kept))
	}
	w.accepted(keys)
	if kept, _ := w.filter([]*event.Event{ev("a")}, nil, time.Now()); len(kept) != 0 {
		t.Errorf("a duplicate within the window was kept")
	}
	if kept, _ := w.filter([]*event.Event{ev("a"), ev("b")}, nil, time.Now().Add(time.Hour)); len(kept) != 2 {
		t.Errorf("kept %d of two events whose window has passed, want 2", len(kept))
	}
	if w.len() != 0 || counter(evicted) != 0 {
		t.Errorf("%d pairs remembered, %v evicted; want both expired, none evicted", w.len(), counter(evicted))
	}

	// A reload: 1h, then off, then on again.
	sub, _ := countingSubscriber(t)
	s := newTestServer(t, nil)
	for _, win := range []string{"1h", "", "1h"} {
		if err := s.Apply(context.Background(), loadConfig(t, dedupBroker(win, sub.URL))); err != nil {
			t.Fatal(err)
		}
		if win != "" {
			post(s.Handler(), "POST", "/ns/b", binary("r"), "{}")
		}
		b := s.lookup("ns/b")
		if got := b.dedup.Load(); (got == nil) != (win == "") || got != nil && got.len() != 1 {
			t.Fatalf("window %q: dedup %v", win, got)
		}
	}
}
