package delivery

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestDLQKeepsWhatFailed: without a dead-letter sink, a failed event goes to the store
// with its attempts, last status and reason, as received (no error extensions), and the
// message is acked only then; a store that keeps failing leaves it undeliverable.
func TestDLQKeepsWhatFailed(t *testing.T) {
	for _, tc := range []struct {
		name          string
		storeFails    bool
		wantStored    int
		wantUndeliver float64
	}{
		{"stored", false, 1, 0},
		{"store fails", true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
				http.Error(w, "busy now", http.StatusServiceUnavailable)
			})
			store, _ := dlq.NewMemory(dlq.DefaultLimits())
			var calls atomic.Int64
			keep := func(ctx context.Context, e dlq.Entry) error {
				calls.Add(1)
				if tc.storeFails {
					return errors.New("disk full")
				}
				_, err := store.Put(ctx, "ns/t", e)
				return err
			}
			q, pub := newQueue(t)
			m := NewMetrics(nil)
			d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, Policy: Policy{Retry: 1, Delay: time.Millisecond}},
				WithMetrics(m), WithDLQ(keep))
			run(t, d)
			pub(newEvent("e1"))
			sluicetest.Eventually(t, 20*time.Second, "ack", func() bool { return q.acked.Load() == 1 })
			p, _ := store.List(context.Background(), "ns/t", 0, 10)
			if len(p.Entries) != tc.wantStored {
				t.Fatalf("stored %d; want %d", len(p.Entries), tc.wantStored)
			}
			if v := value(m.undeliverable.WithLabelValues("ns/t", "no_sink")); v != tc.wantUndeliver {
				t.Errorf("undeliverable_total = %v; want %v", v, tc.wantUndeliver)
			}
			if tc.storeFails {
				if calls.Load() != 2 {
					t.Errorf("store tried %d times; want 2 (the policy's attempts)", calls.Load())
				}
				return
			}
			e := p.Entries[0]
			if e.Event.ID != "e1" || e.Attempts != 2 || e.Code != 503 || e.Reason != "busy now" || e.Dest != sub.URL {
				t.Errorf("entry %+v; want e1 after 2 attempts, 503 busy now to %s", e, sub.URL)
			}
			if _, ok := e.Event.Get(ExtErrorCode); ok {
				t.Errorf("the stored event carries %s; want it as received", ExtErrorCode)
			}
		})
	}
}

// handed is a message handed to Redeliver: settling it is counted.
type handed struct {
	ev                *event.Event
	acked, released   atomic.Int64
	releaseRedelivers bool
}

func (h *handed) Event() *event.Event { return h.ev }
func (h *handed) Ack() error          { h.acked.Add(1); return nil }
func (h *handed) Release() bool       { h.released.Add(1); return h.releaseRedelivers }

// TestRedeliver: a message handed over is delivered and acked; not taken while the
// dispatcher is paused; refused once it stopped.
func TestRedeliver(t *testing.T) {
	sub := newServer(t, nil)
	q, _ := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL})
	if err := d.Redeliver(context.Background(), &handed{ev: newEvent("early")}); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("before Run: %v; want ErrClosed", err)
	}
	stop := run(t, d)
	sluicetest.Eventually(t, 20*time.Second, "running", func() bool {
		select {
		case <-d.started:
			return true
		default:
			return false
		}
	})
	d.Pause()
	m := &handed{ev: newEvent("r1")}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := d.Redeliver(ctx, m)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || sub.n.Load() != 0 {
		t.Fatalf("paused: Redeliver %v with %d deliveries; want it not taken", err, sub.n.Load())
	}
	d.Resume()
	if err := d.Redeliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	sluicetest.Eventually(t, 20*time.Second, "acked", func() bool { return m.acked.Load() == 1 })
	if got := sub.received(); len(got) != 1 || got[0].ev.ID != "r1" {
		t.Fatalf("subscriber got %d events; want r1 once", len(got))
	}
	stop()
	if err := d.Redeliver(context.Background(), &handed{ev: newEvent("late")}); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("after stop: %v; want ErrClosed", err)
	}
}
