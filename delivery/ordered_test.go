package delivery

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

func TestOrderedPerKey(t *testing.T) {
	const events, keys = 1000, 10
	var (
		mu        sync.Mutex
		delivered = map[string][]int{} // key → sequence numbers accepted, in order
		inflight  = map[string]int{}
		overlap   atomic.Int64 // same-key requests in flight at once (must stay 0)
		cur, peak atomic.Int64 // requests in flight overall
		failures  atomic.Int64
	)
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, ev *event.Event) {
		key, _ := ev.Get(ExtPartitionKey)
		seq, _ := strconv.Atoi(ev.ID[len(key)+1:])
		mu.Lock()
		inflight[key]++
		if inflight[key] > 1 {
			overlap.Add(1)
		}
		mu.Unlock()
		if c := cur.Add(1); c > peak.Load() {
			peak.Store(c)
		}
		time.Sleep(time.Duration(rand.IntN(5001)) * time.Microsecond)
		fail := rand.IntN(10) == 0
		mu.Lock()
		inflight[key]--
		if !fail {
			delivered[key] = append(delivered[key], seq)
		}
		mu.Unlock()
		cur.Add(-1)
		if fail {
			failures.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/o", URL: sub.URL, Ordered: true, MaxInFlight: 16,
		Policy: Policy{Retry: 30, Backoff: Linear, Delay: 2 * time.Millisecond}})
	run(t, d)
	evs := make([]*event.Event, events)
	for i := range evs {
		key := fmt.Sprintf("k%d", i%keys)
		evs[i] = newEvent(fmt.Sprintf("%s-%d", key, i/keys), ExtPartitionKey, key)
	}
	pub(evs...)
	sluicetest.Eventually(t, 10*time.Second, "all acks", func() bool { return q.acked.Load() == events })
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		got := delivered[key]
		if len(got) != events/keys {
			t.Errorf("key %s: %d delivered, want %d", key, len(got), events/keys)
		}
		for i, seq := range got {
			if seq != i {
				t.Errorf("key %s: delivery %d was event %d: out of order or duplicated", key, i, seq)
				break
			}
		}
	}
	if n := overlap.Load(); n != 0 {
		t.Errorf("%d times two events of one key were in flight together", n)
	}
	t.Logf("%d failures injected and retried; peak concurrency %d across keys", failures.Load(), peak.Load())
	if failures.Load() == 0 {
		t.Error("no failure was injected; the test proves nothing about retries")
	}
	if peak.Load() < 2 {
		t.Errorf("peak concurrency %d: keys did not proceed in parallel", peak.Load())
	}
}
