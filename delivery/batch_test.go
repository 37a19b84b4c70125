package delivery

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// batchServer is a real HTTP subscriber that accepts batch requests and answers each
// through fn (n counts requests from 1), recording the batches it accepted.
type batchServer struct {
	*httptest.Server
	mu      sync.Mutex
	batches [][]*event.Event // accepted (2xx) batches, in order of answer
	n       atomic.Int64
}

func newBatchServer(t *testing.T, fn func(n int, evs []*event.Event) int) *batchServer {
	s := &batchServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != ContentTypeBatch {
			t.Errorf("Content-Type %q, want %q", ct, ContentTypeBatch)
		}
		evs, err := event.ReadRequest(r, 16<<20)
		if err != nil {
			t.Errorf("invalid batch: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, e := range evs {
			if _, ok := e.Get(ExtTTL); ok {
				t.Errorf("event %s carries %s toward the subscriber", e.ID, ExtTTL)
			}
		}
		code := http.StatusAccepted
		if fn != nil {
			code = fn(int(s.n.Add(1)), evs)
		}
		if code/100 == 2 {
			s.mu.Lock()
			s.batches = append(s.batches, evs)
			s.mu.Unlock()
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *batchServer) accepted() [][]*event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]*event.Event(nil), s.batches...)
}

// TestBatchDelivery: 1,000 events to a trigger batching up to 100 arrive in batches of at
// most 100, each exactly once, every message acked; a lone event goes after the wait.
func TestBatchDelivery(t *testing.T) {
	const events, size = 1000, 100
	sub := newBatchServer(t, nil)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/b", URL: sub.URL, Batch: size, BatchWait: 20 * time.Millisecond,
		Policy: Policy{Retry: 3, Backoff: Linear, Delay: time.Millisecond}})
	run(t, d)
	evs := ids(events, "e")
	for _, e := range evs {
		e.Set(ExtTTL, "255")
	}
	pub(evs...)
	sluicetest.Eventually(t, 10*time.Second, "every event acked", func() bool { return q.acked.Load() == events })
	seen := map[string]int{}
	batches := sub.accepted()
	for _, b := range batches {
		if len(b) > size {
			t.Errorf("a batch of %d events, want at most %d", len(b), size)
		}
		for _, e := range b {
			seen[e.ID]++
		}
	}
	if len(seen) != events {
		t.Errorf("%d distinct events delivered, want %d", len(seen), events)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s delivered %d times", id, n)
		}
	}
	if len(batches) >= events/2 {
		t.Errorf("%d requests for %d events: not batched", len(batches), events)
	}
	// A lone event is sent once the wait is over.
	start := time.Now()
	pub(newEvent("lone"))
	sluicetest.Eventually(t, 5*time.Second, "the lone event acked", func() bool { return q.acked.Load() == events+1 })
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("a lone event went after %v, before the 20 ms wait", took)
	}
}

// TestBatchRetryAndDeadLetter: a failed batch is retried whole; one that keeps failing
// sends each of its events to the dead-letter sink, and every message is acked once.
func TestBatchRetryAndDeadLetter(t *testing.T) {
	var failFirst atomic.Int64
	failFirst.Store(2) // the first two attempts fail with 503
	sub := newBatchServer(t, func(n int, evs []*event.Event) int {
		for _, e := range evs {
			if e.ID[0] == 'x' { // a poisoned batch always fails
				return http.StatusInternalServerError
			}
		}
		if failFirst.Add(-1) >= 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	dls := newServer(t, nil)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/b", URL: sub.URL, Batch: 10, BatchWait: 50 * time.Millisecond,
		Policy: Policy{Retry: 3, Backoff: Linear, Delay: time.Millisecond, DeadLetterSink: dls.URL}})
	run(t, d)
	pub(ids(10, "ok")...)
	sluicetest.Eventually(t, 10*time.Second, "the retried batch acked", func() bool { return q.acked.Load() == 10 })
	if b := sub.accepted(); len(b) != 1 || len(b[0]) != 10 {
		t.Fatalf("accepted batches %d, want one of 10 after two 503s", len(b))
	}
	if n := sub.n.Load(); n != 3 {
		t.Errorf("%d attempts, want 3 (two failures, then the whole batch again)", n)
	}
	pub(ids(5, "x")...)
	sluicetest.Eventually(t, 10*time.Second, "the poisoned batch dead-lettered", func() bool { return q.acked.Load() == 15 })
	got := dls.received()
	if len(got) != 5 {
		t.Fatalf("dead-letter sink got %d events, want 5", len(got))
	}
	for _, r := range got {
		if code, _ := r.ev.Get(ExtErrorCode); code != "500" {
			t.Errorf("dead letter %s: %s = %q, want 500", r.ev.ID, ExtErrorCode, code)
		}
	}
	if n := sub.n.Load(); n != 3+4 {
		t.Errorf("%d attempts in all, want 7 (3, then 1 + 3 retries of the poisoned batch)", n)
	}
}

// TestBatchOrdered: batching an ordered trigger keeps each key's order, and a batch
// holds at most one event per key.
func TestBatchOrdered(t *testing.T) {
	const events, keys = 600, 6
	sub := newBatchServer(t, func(n int, evs []*event.Event) int {
		if n%7 == 0 {
			return http.StatusServiceUnavailable // some batches are retried
		}
		return http.StatusAccepted
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/o", URL: sub.URL, Ordered: true, Batch: 50, BatchWait: 2 * time.Millisecond,
		Policy: Policy{Retry: 10, Backoff: Linear, Delay: time.Millisecond}})
	run(t, d)
	evs := make([]*event.Event, events)
	for i := range evs {
		key := fmt.Sprintf("k%d", i%keys)
		evs[i] = newEvent(key+"-"+strconv.Itoa(i), ExtPartitionKey, key)
	}
	pub(evs...)
	sluicetest.Eventually(t, 20*time.Second, "every event acked", func() bool { return q.acked.Load() == events })
	last := map[string]int{}
	for _, b := range sub.accepted() {
		inBatch := map[string]bool{}
		for _, e := range b {
			key, _ := e.Get(ExtPartitionKey)
			if inBatch[key] {
				t.Errorf("two events of key %s in one batch", key)
			}
			inBatch[key] = true
			seq, _ := strconv.Atoi(e.ID[len(key)+1:])
			if prev, ok := last[key]; ok && seq <= prev {
				t.Errorf("key %s: %d delivered after %d", key, seq, prev)
			}
			last[key] = seq
		}
	}
	if len(last) != keys {
		t.Errorf("%d keys delivered, want %d", len(last), keys)
	}
}

// processCPU is this process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBatchDelivery measures deliveries per second and CPU per event (dispatcher
// and subscriber, both in this process) through a real HTTP subscriber at batch sizes
// 1, 10 and 100:
//
//	go test -run XXX -bench BatchDelivery -benchtime 20000x ./delivery/
func BenchmarkBatchDelivery(b *testing.B) {
	for _, size := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("N=%d", size), func(b *testing.B) {
			var got atomic.Int64
			sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				evs, err := event.ReadRequest(r, 16<<20)
				if err != nil {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				got.Add(int64(len(evs)))
				w.WriteHeader(http.StatusAccepted)
			}))
			defer sub.Close()
			q, pub := newQueue(b)
			d := NewDispatcher(q, Target{Name: "ns/bench", URL: sub.URL, Batch: size, MaxInFlight: 64,
				Policy: Policy{Retry: 3, Backoff: Linear, Delay: time.Millisecond}})
			stop := run(b, d)
			defer stop()
			evs := ids(b.N, "b")
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU(b)
			for i := 0; i < len(evs); i += 1000 {
				pub(evs[i:min(i+1000, len(evs))]...)
			}
			for q.acked.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
			// The subscriber runs in this process too: its CPU is included.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/event")
		})
	}
}
