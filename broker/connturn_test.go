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

// TestConnTurnOverLean: over the lean path under overload (a memory broker whose budget
// holds one event), connections answered 202 while others wait take room for their next
// request before reading it; a connection that then sends nothing gives its room back,
// so a new connection's request is let in, and every event accepted is delivered.
func TestConnTurnOverLean(t *testing.T) {
	sub, delivered, release := gatedSubscriber(t)
	defer release() // before the broker's cleanup shuts it down
	s, addr := serveLean(t, sub, withAdmitWait(5*time.Second))
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
	for deadline := time.Now().Add(30 * time.Second); b.gate.Waiting() < int64(n); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", b.gate.Waiting(), n)
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
	s, addr := serveLean(t, sub.URL, withAdmitWait(wait))
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
