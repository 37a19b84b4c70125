package delivery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// withdrawable is a handed-over message withdrawn once Withdrawn was asked more than
// goneAfter times (goneAfter < 0: its store cannot answer).
type withdrawable struct {
	handed
	goneAfter int
	asked     atomic.Int64
}

func (w *withdrawable) Withdrawn(context.Context) (bool, error) {
	n := w.asked.Add(1)
	if w.goneAfter < 0 {
		return false, errors.New("store unreachable")
	}
	return n > int64(w.goneAfter), nil
}

// TestRedeliverWithdrawn: a redriven message withdrawn before its attempt is settled
// without it, alone or in a batch; one withdrawn during its attempt that fails is settled
// without being stored anew; one whose store cannot answer is delivered.
func TestRedeliverWithdrawn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		batch      int
		goneAfter  map[string]int // by event id; ids starting "fail" are answered 500
		wantSent   []string
		wantStored int
	}{
		{"single", 0, map[string]int{"kept": 1 << 30, "gone": 0, "unknown": -1, "fail-in-flight": 1, "fail-kept": 1 << 30},
			[]string{"fail-in-flight", "fail-kept", "kept", "unknown"}, 1},
		{"batch", 10, map[string]int{"kept": 1 << 30, "gone": 0, "unknown": -1, "gone2": 0},
			[]string{"kept", "unknown"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var sent []string
			sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				evs, err := event.ReadRequest(r, 1<<20)
				if err != nil {
					t.Error(err)
				}
				code := http.StatusAccepted
				mu.Lock()
				for _, e := range evs {
					sent = append(sent, e.ID)
					if strings.HasPrefix(e.ID, "fail") {
						code = http.StatusInternalServerError
					}
				}
				mu.Unlock()
				w.WriteHeader(code)
			}))
			t.Cleanup(sub.Close)
			store, _ := dlq.NewMemory(dlq.DefaultLimits())
			keep := func(ctx context.Context, e dlq.Entry) error { _, err := store.Put(ctx, "ns/t", e); return err }
			q, _ := newQueue(t)
			d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, Batch: tc.batch, BatchWait: 50 * time.Millisecond},
				WithDLQ(keep))
			run(t, d)
			sluicetest.Eventually(t, 20*time.Second, "running", func() bool {
				select {
				case <-d.started:
					return true
				default:
					return false
				}
			})
			var msgs []*withdrawable
			for id, after := range tc.goneAfter {
				m := &withdrawable{handed: handed{ev: newEvent(id)}, goneAfter: after}
				msgs = append(msgs, m)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := d.Redeliver(ctx, m)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			sluicetest.Eventually(t, 20*time.Second, "every message settled", func() bool {
				for _, m := range msgs {
					if m.acked.Load()+m.released.Load() == 0 {
						return false
					}
				}
				return true
			})
			for _, m := range msgs {
				if m.acked.Load() != 1 {
					t.Errorf("%s: acked %d, released %d; want acked once", m.ev.ID, m.acked.Load(), m.released.Load())
				}
			}
			mu.Lock()
			slices.Sort(sent)
			got := slices.Clone(sent)
			mu.Unlock()
			if !slices.Equal(got, tc.wantSent) {
				t.Errorf("subscriber got %v; want %v", got, tc.wantSent)
			}
			if p, _ := store.List(context.Background(), "ns/t", 0, 10); p.Total != tc.wantStored {
				t.Errorf("%d stored anew (%v); want %d", p.Total, p.Entries, tc.wantStored)
			}
		})
	}
}
