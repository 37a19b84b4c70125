package httpserver

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair is a connected loopback pair: the server's end and the client's.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// TestPollReadsWait: a read waits on a timer only while the CPU is saturated, and ends
// its wait when bytes arrive, its deadline passes, the saturation ends or the socket
// closes; past maxPollingReads connections it does not wait.
func TestPollReadsWait(t *testing.T) {
	const later = 60 * time.Millisecond
	tests := []struct {
		name    string
		busy    bool
		active  int32 // connections polling already
		after   func(server, client net.Conn, busy *atomic.Bool, deadline *atomic.Int64)
		minWait time.Duration // the wait must last this long (0: it must not wait)
	}{
		{"not saturated: no wait", false, 0, nil, 0},
		{"saturated, nothing sent: waits until bytes arrive", true, 0,
			func(_, c net.Conn, _ *atomic.Bool, _ *atomic.Int64) { io.WriteString(c, "x") }, later},
		{"saturated: waits until the deadline", true, 0,
			func(_, _ net.Conn, _ *atomic.Bool, d *atomic.Int64) { d.Store(time.Now().UnixNano()) }, later},
		{"saturated: waits until the saturation ends", true, 0,
			func(_, _ net.Conn, b *atomic.Bool, _ *atomic.Int64) { b.Store(false) }, later},
		{"saturated: waits until the client closes", true, 0,
			func(_, c net.Conn, _ *atomic.Bool, _ *atomic.Int64) { c.Close() }, later},
		{"saturated: waits until the socket is closed", true, 0,
			func(s, _ net.Conn, _ *atomic.Bool, _ *atomic.Int64) { s.Close() }, later},
		{"saturated, but enough connections poll: no wait", true, maxPollingReads, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, client := tcpPair(t)
			var busy atomic.Bool
			busy.Store(tt.busy)
			r := &pollReads{busy: &busy, open: func() int { return 1 }}
			r.active.Store(tt.active)
			var deadline atomic.Int64
			if tt.after != nil {
				timer := time.AfterFunc(later, func() { tt.after(server, client, &busy, &deadline) })
				defer timer.Stop()
			}
			begin := time.Now()
			done := make(chan struct{})
			go func() { r.wait(newFDPoller(server), &deadline); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the wait did not end in 5 s")
			}
			took := time.Since(begin)
			// A wait here ends only at the 5 s bound or on a timer tick: far more than the
			// machine's load adds to a call that does not wait.
			if tt.minWait == 0 && took > 2*time.Second {
				t.Errorf("waited %v; want no wait", took)
			}
			if took < tt.minWait {
				t.Errorf("waited %v; want at least %v", took, tt.minWait)
			}
			if got := r.active.Load(); got != tt.active {
				t.Errorf("connections polling after the wait: %d, want %d", got, tt.active)
			}
		})
	}
}

// TestHandoffWhileSaturated: with the CPU saturated (the acceptor polling), requests
// net/http serves on a keep-alive connection are answered, and an idle one is still
// closed at the idle timeout.
func TestHandoffWhileSaturated(t *testing.T) {
	s := newServer(t, echo, WithIdleTimeout(300*time.Millisecond), WithErrorLog(log.New(io.Discard, "", 0)))
	cpu := &fakeCPU{}
	cpu.busy.Store(true)
	s.acceptor.cpu = cpu
	s.acceptor.polling.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	defer func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	for i := range 3 { // GET: handed to net/http, then waits for the next on a timer
		resp, err := c.Get("http://" + s.Addr().String() + "/healthz")
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("GET %d: %s", i, resp.Status)
		}
	}
	// begin precedes the request: the idle timeout cannot start earlier.
	begin := time.Now()
	conn := dialDo(t, s.Addr().String(), "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n") // answered
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))                           // bounds a hang: never closed
	if !s.acceptor.polling.Load() {
		t.Fatal("the acceptor stopped polling: the test measures nothing")
	}
	b, err := io.ReadAll(conn) // nothing more: the server closes at the idle timeout
	if err != nil || len(b) > 0 {
		t.Fatalf("read %q, %v; want the server to close the idle connection", b, err)
	}
	if d := time.Since(begin); d < 250*time.Millisecond {
		t.Errorf("closed after %v; want the 300ms idle timeout first", d)
	}
}

// TestPrefixConnLooks: with the CPU not saturated and other connections open, a
// handed-off connection's read waits on the poller acceptBusyLook at a time; the looks'
// own timeouts never reach net/http, and net/http's deadline, set before the read or
// during it (as it aborts a background read), still ends it.
func TestPrefixConnLooks(t *testing.T) {
	const later = 3 * acceptBusyLook
	tests := []struct {
		name     string
		deadline time.Duration // before the read; 0: none
		after    func(p *prefixConn, client net.Conn)
		wantData bool
		min, max time.Duration
	}{
		{"bytes after three looks", 0, func(_ *prefixConn, c net.Conn) { io.WriteString(c, "x") }, true, later, 20 * time.Second},
		{"net/http's deadline, set before", later, nil, false, later, 20 * time.Second},
		{"net/http's deadline, set during", 0, func(p *prefixConn, _ net.Conn) { p.SetReadDeadline(time.Unix(1, 0)) }, false, later, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server, client := tcpPair(t)
			var busy atomic.Bool
			p := &prefixConn{Conn: server, poller: newFDPoller(server), reads: &pollReads{busy: &busy, open: func() int { return 2 }}}
			if !p.looks() {
				t.Fatal("the read does not look: the test measures nothing")
			}
			if tt.deadline > 0 {
				p.SetReadDeadline(time.Now().Add(tt.deadline))
			}
			if tt.after != nil {
				timer := time.AfterFunc(later, func() { tt.after(p, client) })
				defer timer.Stop()
			}
			// A read that nothing ends (the failure) is ended at 30 s, failing the max; the
			// max only bounds a hang, the machine's load sets the rest.
			hang := time.AfterFunc(30*time.Second, func() { server.Close() })
			defer hang.Stop()
			begin := time.Now()
			n, err := p.Read(make([]byte, 8))
			took := time.Since(begin)
			if tt.wantData && (n != 1 || err != nil) {
				t.Errorf("read %d, %v; want the byte", n, err)
			}
			if !tt.wantData && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("read %d, %v; want net/http's deadline", n, err)
			}
			if took < tt.min-5*time.Millisecond || took > tt.max {
				t.Errorf("the read took %v; want %v to %v", took, tt.min, tt.max)
			}
			if got := p.reads.looking.Load(); got != 0 {
				t.Errorf("reads looking after the read: %d, want 0", got)
			}
		})
	}
}
