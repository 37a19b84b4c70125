package broker

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/internal/httpserver"
)

// TestConnTurnTake: a request comes in on room its connection holds for its broker,
// counted at its own size; room held for another broker is given back, as is room a
// connection holds when it goes idle.
func TestConnTurnTake(t *testing.T) {
	var a, b Broker
	tests := []struct {
		name        string
		held        *Broker
		to          *Broker
		n           int64
		took        bool
		pendA       int64
		idleGivesTo int64 // pending of a after idle()
	}{
		{"same broker", &a, &a, 300, true, 300, 300},
		{"other broker", &a, &b, 300, false, 0, 0},
		{"none held", nil, &a, 300, false, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.admitq.pending.Store(0)
			turn := &connTurn{}
			if tc.held != nil {
				tc.held.admitq.pending.Store(100)
				turn.b, turn.n = tc.held, 100
			}
			if got := turn.take(tc.to, tc.n); got != tc.took {
				t.Fatalf("take: %v, want %v", got, tc.took)
			}
			if p := a.admitq.pending.Load(); p != tc.pendA || turn.b != nil {
				t.Fatalf("after take: pending %d (want %d), still held %v", p, tc.pendA, turn.b != nil)
			}
			turn.idle() // nothing held any more: changes nothing
			if p := a.admitq.pending.Load(); p != tc.idleGivesTo {
				t.Fatalf("after idle: pending %d, want %d", p, tc.idleGivesTo)
			}
		})
	}
}

// TestConnTurnOverLean: over the lean path under overload (a memory broker whose budget
// holds one event), connections answered 202 while others wait take room for their next
// request before reading it; a connection that then sends nothing gives its room back,
// so a new connection's request is let in, and every event accepted is delivered.
func TestConnTurnOverLean(t *testing.T) {
	sub, delivered, release := gatedSubscriber(t)
	defer release() // before the broker's cleanup shuts it down
	s := newTestServer(t, memory.NewBudget(1024), WithAdmitWait(5*time.Second))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub))); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, err := httpserver.New(ln, s.Handler(), httpserver.WithConnContext(s.ConnContext))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve() }()
	defer func() {
		hs.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	body := `"` + strings.Repeat("x", 600) + `"` // two do not fit the budget
	ca, bra := dial()
	if resp, _ := rawPost(t, ca, bra, "a1", body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a1: %d", resp.StatusCode)
	}
	// Two more wait in the queue, b's ahead of c's (the budget is full until a1 is
	// delivered); once let in, each is answered while the other or a turn still waits.
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, id := range []string{"b1", "c1"} {
		c, br := dial()
		wg.Go(func() {
			resp, _ := rawPost(t, c, br, id, body)
			codes[i] = resp.StatusCode
		})
		waitQueued(t, s, i+1)
	}
	release()
	wg.Wait()
	if codes[0] != http.StatusAccepted || codes[1] != http.StatusAccepted {
		t.Fatalf("queued requests answered %v, want 202s", codes)
	}
	// b and c now send nothing: the room their connections took is given back, so a new
	// connection's request is let in (it would wait out the 5 s and get a 429 if not).
	cd, brd := dial()
	resp, took := rawPost(t, cd, brd, "d1", body)
	if resp.StatusCode != http.StatusAccepted || took > 3*time.Second {
		t.Fatalf("d1 after the others went idle: %d after %v, want 202 at once", resp.StatusCode, took)
	}
	waitDelivered(t, delivered, 4)
}

// waitQueued waits until n requests wait in the admission queue of the test broker.
func waitQueued(t *testing.T, s *Server, n int) {
	t.Helper()
	b := s.lookup("ns/b")
	for deadline := time.Now().Add(5 * time.Second); b.admitq.n.Load() < int64(n); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", b.admitq.n.Load(), n)
		}
	}
}

// waitDelivered waits until the subscriber has n events.
func waitDelivered(t *testing.T, delivered *atomic.Int64, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); delivered.Load() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d, want %d", delivered.Load(), n)
		}
	}
}
