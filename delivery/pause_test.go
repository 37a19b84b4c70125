package delivery

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// parkedJobs is how many jobs d has set aside while paused.
func parkedJobs(d *Dispatcher) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pause.parked)
}

// TestPauseBeforeRun: a dispatcher paused before it runs takes nothing from its
// consumer: every event published stays queued and the subscriber gets none; on Resume
// every one is delivered, once.
func TestPauseBeforeRun(t *testing.T) {
	const n = 50
	sub := newServer(t, nil)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/p", URL: sub.URL})
	d.Pause()
	run(t, d)
	pub(ids(n, "e")...)
	if got := q.Len(); got != n {
		t.Fatalf("queue length %d while paused, want all %d", got, n)
	}
	// Nothing taken: the queue's length counts what was handed out too, jobs does not.
	select {
	case <-d.started:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not start")
	}
	if held := d.jobs.n.Load(); held != 0 {
		t.Fatalf("%d events taken from the consumer while paused", held)
	}
	if got := sub.n.Load(); got != 0 {
		t.Fatalf("subscriber got %d events while paused", got)
	}
	d.Resume()
	sluicetest.Eventually(t, 30*time.Second, "every event acked", func() bool { return q.acked.Load() == n })
	if got := sub.n.Load(); got != n {
		t.Errorf("subscriber got %d events, want %d", got, n)
	}
}

// TestPauseWhileReceiving: Pause ends a Receive in progress before it returns, so
// events published after it stay queued.
func TestPauseWhileReceiving(t *testing.T) {
	sub := newServer(t, nil)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/p", URL: sub.URL})
	run(t, d)
	pub(newEvent("first"))
	sluicetest.Eventually(t, 30*time.Second, "first acked", func() bool { return q.acked.Load() == 1 })
	// The receive loop now waits in Receive.
	d.Pause()
	if !d.Paused() {
		t.Fatal("not paused")
	}
	pub(ids(5, "later")...)
	if held := d.jobs.n.Load(); held != 0 || q.Len() != 5 {
		t.Fatalf("%d events taken after Pause returned, %d queued; want 0 and 5", held, q.Len())
	}
	d.Resume()
	d.Resume() // twice: no effect
	sluicetest.Eventually(t, 30*time.Second, "all acked", func() bool { return q.acked.Load() == 6 })
}

// TestPauseParksHeldJobs: on an ordered target whose subscriber fails, events already
// held keep being retried until Pause; then the retries come due and are set aside, no
// attempt starts, and on Resume every event is delivered once, in order per key.
func TestPauseParksHeldJobs(t *testing.T) {
	const keys, perKey = 3, 4
	var (
		failing  atomic.Bool
		attempts atomic.Int64
		mu       sync.Mutex
		got      = map[string][]int{}
	)
	failing.Store(true)
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, ev *event.Event) {
		attempts.Add(1)
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		key, _ := ev.Get(ExtPartitionKey)
		seq, _ := strconv.Atoi(strings.TrimPrefix(ev.ID, key+"-"))
		mu.Lock()
		got[key] = append(got[key], seq)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/o", URL: sub.URL, Ordered: true, MaxInFlight: 4,
		Policy: Policy{Retry: 1000, Backoff: Linear, Delay: 5 * time.Millisecond}})
	run(t, d)
	var evs []*event.Event
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			evs = append(evs, newEvent(fmt.Sprintf("%s-%d", key, i), ExtPartitionKey, key))
		}
	}
	pub(evs...)
	sluicetest.Eventually(t, 30*time.Second, "each key's first event tried", func() bool { return attempts.Load() >= 2*keys })
	d.Pause()
	// Each key's first event is the one active job of its key: once all three are set
	// aside, nothing is in flight or waiting on a timer, and no attempt can start.
	sluicetest.Eventually(t, 30*time.Second, "the active jobs parked", func() bool { return parkedJobs(d) == keys })
	before := attempts.Load()
	failing.Store(false)
	if q.acked.Load() != 0 || attempts.Load() != before {
		t.Fatalf("%d acked, %d attempts after parking (%d before)", q.acked.Load(), attempts.Load(), before)
	}
	d.Resume()
	sluicetest.Eventually(t, 30*time.Second, "every event acked", func() bool { return q.acked.Load() == keys*perKey })
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		if want := []int{0, 1, 2, 3}; fmt.Sprint(got[key]) != fmt.Sprint(want) {
			t.Errorf("key %s delivered %v, want %v", key, got[key], want)
		}
	}
}

// TestPausedDrain: Drain resumes a paused dispatcher and delivers, within its context,
// both the event it held (parked) and those still queued in the consumer: a memory
// channel loses none of them at shutdown.
func TestPausedDrain(t *testing.T) {
	const queued = 20
	var failing atomic.Bool
	failing.Store(true)
	sub := newServer(t, func(w http.ResponseWriter, _ *http.Request, _ int, _ *event.Event) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/p", URL: sub.URL, Policy: Policy{Retry: 1000, Backoff: Linear, Delay: 5 * time.Millisecond}})
	run(t, d)
	pub(newEvent("held"))
	sluicetest.Eventually(t, 30*time.Second, "tried", func() bool { return sub.n.Load() >= 1 })
	d.Pause()
	sluicetest.Eventually(t, 30*time.Second, "parked", func() bool { return parkedJobs(d) == 1 })
	pub(ids(queued, "q")...)
	failing.Store(false)
	ctx, cancel := contextWithTimeout(time.Minute) // only bounds a hang
	defer cancel()
	if left := d.Drain(ctx); left != 0 {
		t.Errorf("Drain left %d, want 0", left)
	}
	if got := q.acked.Load(); got != queued+1 || q.released.Load() != 0 || q.Len() != 0 {
		t.Errorf("acked %d, released %d, queued %d; want %d, 0 and 0", got, q.released.Load(), q.Len(), queued+1)
	}
}
