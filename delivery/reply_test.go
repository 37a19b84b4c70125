package delivery

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// replyB answers each event with a binary-mode reply of type b carrying the same data
// prefixed with "re:".
func replyB(w http.ResponseWriter, _ *http.Request, _ int, ev *event.Event) {
	r := &event.Event{SpecVersion: "1.0", ID: "reply-" + ev.ID, Source: "/a", Type: "b",
		DataContentType: "text/plain", Data: append([]byte("re:"), ev.Data...)}
	event.WriteHeaders(w.Header(), r)
	w.WriteHeader(http.StatusOK)
	w.Write(r.Data)
}

type replies struct {
	mu  sync.Mutex
	got []*event.Event
	err error
}

func (r *replies) replier(_ context.Context, e *event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	r.got = append(r.got, e)
	return nil
}

func (r *replies) list() []*event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*event.Event(nil), r.got...)
}

func TestReplyIngested(t *testing.T) {
	sub := newServer(t, replyB)
	q, pub := newQueue(t)
	var rs replies
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL}, WithReplier(rs.replier), WithMetrics(m))
	run(t, d)
	pub(newEvent("e1", ExtTTL, "255"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	got := rs.list()
	if len(got) != 1 {
		t.Fatalf("replier got %d events, want 1", len(got))
	}
	r := got[0]
	if r.Type != "b" || r.ID != "reply-e1" || string(r.Data) != `re:{"n":"e1"}` || r.DataContentType != "text/plain" {
		t.Errorf("reply changed: %+v data %q", r, r.Data)
	}
	if ttl, _ := r.Get(ExtTTL); ttl != "254" {
		t.Errorf("reply knativebrokerttl = %q, want 254", ttl)
	}
	if v := value(m.replies.WithLabelValues("ns/a", "ingested")); v != 1 {
		t.Errorf("replies_total{ingested} = %v, want 1", v)
	}
}

func TestReplyStructured(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, ev *event.Event) {
		w.Header().Set("Content-Type", event.MediaTypeStructured)
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"specversion":"1.0","id":"r1","source":"/a","type":"b","data":{"x":1}}`))
	})
	q, pub := newQueue(t)
	var rs replies
	d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL}, WithReplier(rs.replier))
	run(t, d)
	pub(newEvent("e1", ExtTTL, "7"))
	sluicetest.Eventually(t, 5*time.Second, "reply", func() bool { return len(rs.list()) == 1 })
	r := rs.list()[0]
	if ttl, _ := r.Get(ExtTTL); r.Type != "b" || ttl != "6" || string(r.Data) != `{"x":1}` {
		t.Errorf("reply type %q ttl %q data %q, want b, 6, {\"x\":1}", r.Type, ttl, r.Data)
	}
}

func TestReplyTTLStopsLoop(t *testing.T) {
	sub := newServer(t, replyB)
	q, pub := newQueue(t)
	var rs replies
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL}, WithReplier(rs.replier), WithMetrics(m))
	run(t, d)
	pub(newEvent("e1", ExtTTL, "1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	if n := len(rs.list()); n != 0 {
		t.Errorf("replier got %d events, want 0: ttl ran out", n)
	}
	if v := value(m.loopStopped.WithLabelValues("ns/a")); v != 1 {
		t.Errorf("loop_stopped_total = %v, want 1", v)
	}
	if v := value(m.delivered.WithLabelValues("ns/a")); v != 1 {
		t.Errorf("delivered_total = %v, want 1 (the delivery itself succeeded)", v)
	}
}

func TestReplierErrorRetriesDelivery(t *testing.T) {
	sub := newServer(t, replyB)
	q, pub := newQueue(t)
	var calls atomic.Int64
	var rs replies
	replier := func(ctx context.Context, e *event.Event) error {
		if calls.Add(1) <= 2 {
			return channel.ErrFull
		}
		return rs.replier(ctx, e)
	}
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL, Policy: Policy{Retry: 3, Delay: 5 * time.Millisecond}},
		WithReplier(replier), WithMetrics(m))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	if n := sub.n.Load(); n != 3 {
		t.Errorf("subscriber saw %d attempts, want 3 (two replies refused)", n)
	}
	if n := len(rs.list()); n != 1 {
		t.Errorf("replies ingested %d, want 1", n)
	}
	if v := value(m.replies.WithLabelValues("ns/a", "failed")); v != 2 {
		t.Errorf("replies_total{failed} = %v, want 2", v)
	}
}

// TestReplyNotStoredDeadLetter: a reply the channel refuses is retried under the policy,
// except one it can never store (ErrTooLarge), which is dead-lettered after one
// attempt; the dead letter says the channel's reason, never the backend's error.
func TestReplyNotStoredDeadLetter(t *testing.T) {
	const secret = "dial tcp 10.1.2.3:9092"
	tests := []struct {
		name     string
		err      error
		attempts int64
		data     string
	}{
		{"too large", channel.Refuse(channel.ErrTooLarge, "event larger than Kafka's largest message", errors.New(secret)),
			1, "reply not stored: event larger than Kafka's largest message"},
		{"unavailable", channel.Refuse(channel.ErrUnavailable, "Kafka did not store the events", errors.New(secret)),
			3, "reply not stored: Kafka did not store the events"},
		{"unavailable, no reason", fmt.Errorf("%w: %s", channel.ErrUnavailable, secret),
			3, "reply not stored: the channel's store is unavailable"},
		{"not the channel's", errors.New("reply r: knativebrokerttl x is not an integer"),
			3, "reply reply-e1 not ingested: reply r: knativebrokerttl x is not an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newServer(t, replyB)
			dls := newServer(t, nil)
			q, pub := newQueue(t)
			rs := replies{err: tt.err}
			var logs strings.Builder
			d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL,
				Policy: Policy{Retry: 2, Delay: time.Millisecond, DeadLetterSink: dls.URL}}, WithReplier(rs.replier),
				WithLogger(testLogger(&logs)))
			run(t, d)
			pub(newEvent("e1"))
			sluicetest.Eventually(t, 5*time.Second, "dead-lettered", func() bool { return q.acked.Load() == 1 })
			if n := sub.n.Load(); n != tt.attempts {
				t.Errorf("subscriber saw %d attempts, want %d", n, tt.attempts)
			}
			got := dls.received()
			if len(got) != 1 {
				t.Fatalf("dead letters %d, want 1", len(got))
			}
			enc, _ := got[0].ev.Get(ExtErrorData)
			data, err := base64.StdEncoding.DecodeString(enc)
			if err != nil || string(data) != tt.data {
				t.Errorf("%s = %q (%v), want %q", ExtErrorData, data, err, tt.data)
			}
			// The whole error is in the log, once however many attempts failed.
			want := tt.err.Error()
			if n := strings.Count(logs.String(), want); n != 1 {
				t.Errorf("the log has %q %d times, want once:\n%s", want, n, logs.String())
			}
		})
	}
}

func TestReplyURL(t *testing.T) {
	sub := newServer(t, replyB)
	replyTo := newServer(t, func(w http.ResponseWriter, _ *http.Request, n int, _ *event.Event) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	q, pub := newQueue(t)
	var rs replies
	rs.err = errors.New("must not be called")
	d := NewDispatcher(q, Target{Name: "ns/s", URL: sub.URL, ReplyURL: replyTo.URL,
		Policy: Policy{Retry: 2, Delay: 5 * time.Millisecond}}, WithReplier(rs.replier))
	run(t, d)
	pub(newEvent("e1", ExtTTL, "10"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	got := replyTo.received()
	if len(got) != 2 || sub.n.Load() != 1 {
		t.Fatalf("reply URL got %d posts, subscriber %d; want 2 and 1", len(got), sub.n.Load())
	}
	r := got[1].ev
	// The reply keeps type, id and data, and carries the decremented ttl, so the loop
	// guard holds when the reply URL is a broker.
	if ttl, _ := r.Get(ExtTTL); ttl != "9" || r.Type != "b" || r.ID != "reply-e1" || string(r.Data) != `re:{"n":"e1"}` {
		t.Errorf("reply URL got %+v", r)
	}
}

func TestNonEventBodyCounted(t *testing.T) {
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("thanks"))
	})
	q, pub := newQueue(t)
	m := NewMetrics(nil)
	d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL}, WithMetrics(m))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
	if v := value(m.replies.WithLabelValues("ns/a", "not_event")); v != 1 {
		t.Errorf("replies_total{not_event} = %v, want 1", v)
	}
	if v := value(m.delivered.WithLabelValues("ns/a")); v != 1 {
		t.Errorf("delivered_total = %v, want 1", v)
	}
}

// TestReplyOverMaxReplyBytes: a reply larger than WithMaxReplyBytes (the broker's
// --max-event-bytes), whether its length is announced or not, is not ingested: the
// delivery fails for good, without a retry, and the event is dead-lettered naming the
// limit. A reply at the bound is ingested.
func TestReplyOverMaxReplyBytes(t *testing.T) {
	const limit = 1024
	for _, tc := range []struct {
		name    string
		size    int
		chunked bool
		ok      bool
	}{
		{"at the bound", limit, false, true},
		{"over, with Content-Length", limit + 1, false, false},
		{"over, chunked", 4 * limit, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, ev *event.Event) {
				r := &event.Event{SpecVersion: "1.0", ID: "reply-" + ev.ID, Source: "/a", Type: "b"}
				event.WriteHeaders(w.Header(), r)
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusOK)
				body := strings.Repeat("x", tc.size)
				if tc.chunked {
					for i := 0; i < len(body); i += 256 {
						w.Write([]byte(body[i : i+256]))
						w.(http.Flusher).Flush()
					}
					return
				}
				w.Write([]byte(body))
			})
			dls := newServer(t, nil)
			q, pub := newQueue(t)
			var rs replies
			d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL,
				Policy: Policy{Retry: 3, Delay: time.Millisecond, DeadLetterSink: dls.URL}},
				WithReplier(rs.replier), WithMaxReplyBytes(limit))
			run(t, d)
			pub(newEvent("e1"))
			sluicetest.Eventually(t, 30*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
			if tc.ok {
				if len(rs.list()) != 1 || len(dls.received()) != 0 {
					t.Fatalf("reply at the bound: %d ingested, %d dead letters; want 1, 0", len(rs.list()), len(dls.received()))
				}
				return
			}
			if n := sub.n.Load(); n != 1 {
				t.Errorf("%d attempts; want 1: a reply too large is not retried", n)
			}
			got := dls.received()
			if len(rs.list()) != 0 || len(got) != 1 {
				t.Fatalf("%d ingested, %d dead letters; want 0, 1", len(rs.list()), len(got))
			}
			enc, _ := got[0].ev.Get(ExtErrorData)
			data, _ := base64.StdEncoding.DecodeString(enc)
			if !strings.Contains(string(data), "--max-event-bytes") {
				t.Errorf("knativeerrordata %q does not name --max-event-bytes", data)
			}
		})
	}
}

// TestReplyAttributeLimit: a reply with 450 ce- headers (more attributes than an event
// may have, within the response head's bound of MaxResponseHeaderFields) is an invalid
// reply, as docs/delivery.md says of one: counted, logged with the reason naming the
// limit, not re-ingested; the delivery itself is done. A reply of exactly 400 attributes
// is ingested, with the knativebrokerttl the dispatcher adds as its 401st. (A response of
// 40,000 headers fails the attempt at the head's bound: TestResponseHeadBounded.)
func TestReplyAttributeLimit(t *testing.T) {
	tests := []struct {
		name    string
		exts    int // beside the four required attributes
		outcome string
		log     string
	}{
		{"at the limit", 396, "ingested", ""},
		{"450 ce- headers", 450, "invalid", "more than 400 attributes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
				h := w.Header()
				for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "r1", "Ce-Source": "/a", "Ce-Type": "b"} {
					h[k] = []string{v}
				}
				for i := range tt.exts {
					h["Ce-X"+strconv.Itoa(i)] = []string{"v"}
				}
				w.WriteHeader(http.StatusOK)
			})
			q, pub := newQueue(t)
			var rs replies
			var logs strings.Builder
			m := NewMetrics(nil)
			d := NewDispatcher(q, Target{Name: "ns/a", URL: sub.URL}, WithReplier(rs.replier), WithMetrics(m),
				WithLogger(testLogger(&logs)))
			run(t, d)
			pub(newEvent("e1", ExtTTL, "255"))
			sluicetest.Eventually(t, 60*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
			got := rs.list()
			if tt.outcome == "ingested" {
				if len(got) != 1 || len(got[0].Extensions) != tt.exts+1 {
					t.Fatalf("replier got %d events, want 1 of %d extensions", len(got), tt.exts+1)
				}
			} else if len(got) != 0 {
				t.Errorf("replier got %d events, want none", len(got))
			}
			if v := value(m.replies.WithLabelValues("ns/a", tt.outcome)); v != 1 {
				t.Errorf("replies_total{%s} = %v, want 1", tt.outcome, v)
			}
			if v := value(m.delivered.WithLabelValues("ns/a")); v != 1 {
				t.Errorf("delivered_total = %v, want 1", v)
			}
			if n := sub.n.Load(); n != 1 {
				t.Errorf("subscriber saw %d attempts, want 1", n)
			}
			if !strings.Contains(logs.String(), tt.log) {
				t.Errorf("the log does not say %q:\n%.2000s", tt.log, logs.String())
			}
		})
	}
}
