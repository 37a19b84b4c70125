package broker

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/internal/httpserver"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestConnTurnEnter: a request comes in on room its connection holds for its broker,
// counted at its own size; room held for another broker is given back, as is room a
// connection holds when it goes idle; a connection that waited in vain makes its next
// request late, once; a connection without a turn lets nothing in.
func TestConnTurnEnter(t *testing.T) {
	var a, b Broker
	tests := []struct {
		name        string
		held        *Broker
		wasLate     bool
		to          *Broker
		n           int64
		took        bool
		late        bool
		pendA       int64
		idleGivesTo int64 // pending of a after idle()
	}{
		{"same broker", &a, false, &a, 300, true, false, 300, 300},
		{"other broker", &a, false, &b, 300, false, false, 0, 0},
		{"none held", nil, false, &a, 300, false, false, 0, 0},
		{"none held, late", nil, true, &a, 300, false, true, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.admitq.pending.Store(0)
			turn := &connTurn{late: tc.wasLate}
			if tc.held != nil {
				tc.held.admitq.pending.Store(100)
				turn.b, turn.n = tc.held, 100
			}
			if took, late := turn.enter(tc.to, tc.n); took != tc.took || late != tc.late {
				t.Fatalf("enter: %v, late %v; want %v, late %v", took, late, tc.took, tc.late)
			}
			if p := a.admitq.pending.Load(); p != tc.pendA || turn.b != nil {
				t.Fatalf("after enter: pending %d (want %d), still held %v", p, tc.pendA, turn.b != nil)
			}
			if _, late := turn.enter(tc.to, tc.n); late {
				t.Fatal("a second request is late too")
			}
			turn.idle() // nothing held any more: changes nothing
			if p := a.admitq.pending.Load(); p != tc.idleGivesTo {
				t.Fatalf("after idle: pending %d, want %d", p, tc.idleGivesTo)
			}
		})
	}
	var none *connTurn
	if took, late := none.enter(&a, 10); took || late {
		t.Errorf("no turn: %v, late %v; want neither", took, late)
	}
}

// TestConnTurnOverLean: over the lean path under overload (a memory broker whose budget
// holds one event), connections answered 202 while others wait take room for their next
// request before reading it; a connection that then sends nothing gives its room back,
// so a new connection's request is let in, and every event accepted is delivered.
func TestConnTurnOverLean(t *testing.T) {
	sub, delivered, release := gatedSubscriber(t)
	defer release() // before the broker's cleanup shuts it down
	s, addr := serveLean(t, sub, WithAdmitWait(5*time.Second))
	dial := func() (net.Conn, *bufio.Reader) { return dialTo(t, addr) }
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
	if resp.StatusCode != http.StatusAccepted { // a 429 had it waited in vain
		t.Fatalf("d1 after the others went idle: %d after %v, want 202 at once", resp.StatusCode, took)
	}
	sluicetest.Eventually(t, 10*time.Second, "4 deliveries", func() bool { return delivered.Load() >= 4 })
}

// serveLean serves a memory broker of a 1 KiB budget with one trigger to subscriber on
// the lean path, with its connection turns (httpserver.WithConnContext), until t ends.
func serveLean(t *testing.T, subscriber string, opts ...Option) (*Server, string) {
	t.Helper()
	s := newTestServer(t, memory.NewBudget(1024), opts...)
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", subscriber))); err != nil {
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
	t.Cleanup(func() {
		hs.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// dialTo connects to addr until t ends.
func dialTo(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// waitQueued waits until n requests wait in the admission queue of the test broker.
func waitQueued(t *testing.T, s *Server, n int) {
	t.Helper()
	b := s.lookup("ns/b")
	for deadline := time.Now().Add(30 * time.Second); b.admitq.n.Load() < int64(n); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", b.admitq.n.Load(), n)
		}
	}
}

// TestConnTurnLate: a request sent while its connection waited in vain for room for it
// is answered 429 as soon as it is read, not after waiting AdmitWait a second time. The
// wait is long (10 s) so that one wait and two are 10 s apart, far more than the
// machine's load can add.
func TestConnTurnLate(t *testing.T) {
	const wait = 10 * time.Second
	tokens := make(chan struct{}, 10) // one delivery each
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-tokens
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sub.Close()
	defer func() {
		for range cap(tokens) {
			tokens <- struct{}{}
		}
	}()
	s, addr := serveLean(t, sub.URL, WithAdmitWait(wait))
	dial := func() (net.Conn, *bufio.Reader) { return dialTo(t, addr) }
	body := `"` + strings.Repeat("x", 600) + `"` // two do not fit the budget
	ca, bra := dial()
	if resp, _ := rawPost(t, ca, bra, "a1", body); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a1: %d", resp.StatusCode)
	}
	cb, brb := dial()
	cc, brc := dial()
	first := make(chan *http.Response, 1)
	go func() { resp, _ := rawPost(t, cb, brb, "b1", body); first <- resp }()
	waitQueued(t, s, 1)
	third := make(chan int, 1)
	go func() { resp, _ := rawPost(t, cc, brc, "c1", body); third <- resp.StatusCode }() // waits behind b1 in vain
	waitQueued(t, s, 2)
	tokens <- struct{}{} // a1 delivered: room for b1, answered while c1 waits
	if resp := <-first; resp.StatusCode != http.StatusAccepted {
		t.Fatalf("b1: %d", resp.StatusCode)
	}
	// b's connection now waits for room for its next request, in vain (b1 holds the
	// budget); b2, sent meanwhile, is answered once that wait is over.
	resp, took := rawPost(t, cb, brb, "b2", body)
	if resp.StatusCode != http.StatusTooManyRequests || took > wait+wait/2 {
		t.Fatalf("b2: %d after %v; want 429 within %v (one wait, not two)", resp.StatusCode, took, wait+wait/2)
	}
	if code := <-third; code != http.StatusTooManyRequests {
		t.Errorf("c1: %d, want 429 (b1 holds the budget)", code)
	}
}
