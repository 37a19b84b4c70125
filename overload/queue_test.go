package overload

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAdmitQueueOrder: waiters are let in oldest first, one per unit of room, and each
// one's bytes count as pending until stored.
func TestAdmitQueueOrder(t *testing.T) {
	var q admitQueue
	var room atomic.Int64 // units of room; each admission takes one
	admit := func() bool {
		for {
			r := room.Load()
			if r <= 0 {
				return false
			}
			if room.CompareAndSwap(r, r-1) {
				return true
			}
		}
	}
	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if !q.wait(context.Background(), 100, 5*time.Second, admit) {
				t.Errorf("waiter %d was not admitted", i)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
		for q.n.Load() != int64(i+1) { // queue them in order
			time.Sleep(time.Millisecond)
		}
	}
	if !q.busy() {
		t.Fatal("busy() = false with waiters queued")
	}
	for i := range n {
		room.Add(1)
		for {
			mu.Lock()
			got := len(order)
			mu.Unlock()
			if got == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if p := q.pending.Load(); p != int64(100*(i+1)) {
			t.Errorf("after %d admissions pending = %d, want %d", i+1, p, 100*(i+1))
		}
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("admission order %v, want oldest first", order)
		}
	}
	for range n {
		q.stored(100)
	}
	if q.busy() || q.pending.Load() != 0 || q.front != nil || q.back != nil {
		t.Errorf("after all: busy %v, pending %d, front %v, back %v", q.busy(), q.pending.Load(), q.front, q.back)
	}
}

// TestAdmitQueueGivesUp: a waiter that finds no room gives up after its wait or when its
// context ends, and hands the turn on so the next one is still let in.
func TestAdmitQueueGivesUp(t *testing.T) {
	tests := []struct {
		name   string
		wait   time.Duration
		cancel bool
	}{
		{"wait expires", 30 * time.Millisecond, false},
		{"context ends", time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q admitQueue
			var open atomic.Bool
			admit := open.Load
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := make(chan bool, 1)
			start := time.Now()
			go func() { first <- q.wait(ctx, 10, tt.wait, admit) }()
			for q.n.Load() != 1 {
				time.Sleep(time.Millisecond)
			}
			second := make(chan bool, 1)
			go func() { second <- q.wait(context.Background(), 20, 5*time.Second, admit) }()
			for q.n.Load() != 2 {
				time.Sleep(time.Millisecond)
			}
			if tt.cancel {
				cancel()
			}
			if <-first {
				t.Fatal("the first waiter was admitted with no room")
			}
			if d := time.Since(start); !tt.cancel && d < tt.wait {
				t.Errorf("gave up after %v, before its wait of %v", d, tt.wait)
			}
			open.Store(true)
			select {
			case ok := <-second:
				if !ok {
					t.Fatal("the second waiter was not admitted")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the second waiter never got the turn")
			}
			if p := q.pending.Load(); p != 20 {
				t.Errorf("pending = %d, want only the admitted waiter's 20", p)
			}
		})
	}
}

// TestAdmitQueueBoundedWait: with no room, every waiter — not only the oldest, which
// polls — gives up after its own wait (the bound is on a hang, not on the machine's speed).
func TestAdmitQueueBoundedWait(t *testing.T) {
	var q admitQueue
	const waiters, d = 20, 50 * time.Millisecond
	var wg sync.WaitGroup
	var worst atomic.Int64
	for range waiters {
		wg.Go(func() {
			start := time.Now()
			if q.wait(context.Background(), 1, d, func() bool { return false }) {
				t.Error("admitted with no room")
			}
			if took := time.Since(start); int64(took) > worst.Load() {
				worst.Store(int64(took))
			}
		})
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	if w := time.Duration(worst.Load()); w > d+20*time.Second { // a waiter that never gives up; the rest is the machine's load
		t.Errorf("a waiter gave up after %v; its wait was %v", w, d)
	}
	if q.busy() || q.pending.Load() != 0 {
		t.Errorf("after all gave up: busy %v, pending %d", q.busy(), q.pending.Load())
	}
}

// TestAdmitQueueLeaveFromTheMiddle: a waiter behind the oldest whose context ends leaves
// the queue whole: those before and after it are let in, in order, and the queue ends
// empty; the waiters, pooled, serve the next round the same way.
func TestAdmitQueueLeaveFromTheMiddle(t *testing.T) {
	var q admitQueue
	var room atomic.Int64
	admit := func() bool { // takes a unit of room if there is one
		if room.Add(-1) >= 0 {
			return true
		}
		room.Add(1)
		return false
	}
	for round := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		results := make([]chan bool, 3)
		for i := range results {
			results[i] = make(chan bool, 1)
			wctx := context.Background()
			if i == 1 {
				wctx = ctx
			}
			go func() { results[i] <- q.wait(wctx, 1, 5*time.Second, admit) }()
			for q.n.Load() != int64(i+1) {
				time.Sleep(time.Millisecond)
			}
		}
		cancel()
		if <-results[1] {
			t.Fatalf("round %d: the middle waiter was admitted after its context ended", round)
		}
		room.Store(1)
		if !<-results[0] {
			t.Fatalf("round %d: the oldest waiter was not admitted", round)
		}
		select {
		case <-results[2]:
			t.Fatalf("round %d: the last waiter was let in without room", round)
		case <-time.After(20 * time.Millisecond):
		}
		room.Store(1)
		if !<-results[2] {
			t.Fatalf("round %d: the last waiter was not admitted", round)
		}
		q.stored(2)
		if q.busy() || q.front != nil || q.back != nil || q.pending.Load() != 0 {
			t.Fatalf("round %d: after all: busy %v, front %v, back %v, pending %d", round, q.busy(), q.front, q.back, q.pending.Load())
		}
	}
}

// BenchmarkAdmitQueueWait is one request's way through the queue when room comes at
// once: queued, given the turn, let in, gone (go test -bench AdmitQueue -benchmem).
func BenchmarkAdmitQueueWait(b *testing.B) {
	var q admitQueue
	admit := func() bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		if !q.wait(context.Background(), 1, time.Second, admit) {
			b.Fatal("not admitted")
		}
		q.stored(1)
	}
}
