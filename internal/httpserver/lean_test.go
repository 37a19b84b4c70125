package httpserver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// echo answers what it was asked, so that two servers can be compared: the method, the
// target, the host, every header, a hash of the body. Some paths answer otherwise:
// /flush flushes a response with a Content-Length, /chunk flushes one without (chunked),
// /status/N answers N with a body, /big writes 200 KiB without a Content-Length, /panic
// panics, /close asks for Connection: close.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s path=%q query=%q host=%q len=%d proto=%s remote=%t\n", r.Method, r.RequestURI,
		r.URL.Path, r.URL.RawQuery, r.Host, r.ContentLength, r.Proto, r.RemoteAddr != "")
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, r.Header[k])
	}
	fmt.Fprintf(&b, "body %d %x\n", len(body), sha256.Sum256(body))
	switch {
	case r.URL.Path == "/flush":
		w.Header().Set("Content-Length", fmt.Sprint(b.Len()))
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, b.String())
		http.NewResponseController(w).Flush()
	case r.URL.Path == "/chunk":
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		io.WriteString(w, b.String())
	case strings.HasPrefix(r.URL.Path, "/status/"):
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/status/"), &code)
		w.Header().Set("Retry-After", "1")
		http.Error(w, b.String(), code)
	case r.URL.Path == "/big": // more than the writers buffer: streamed, chunked
		for range 200 {
			io.WriteString(w, strings.Repeat("b", 1023)+"\n")
		}
	case r.URL.Path == "/panic":
		panic("test panic")
	case r.URL.Path == "/close":
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusAccepted)
	default:
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, b.String())
	}
})

// end is a last request that asks the server to close the connection.
const end = "GET /end HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"

// exchange sends raw and then end on a new connection to addr and reads every response
// until the server closes the connection.
func exchange(t *testing.T, addr, raw string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.WriteString(c, raw+end)
	br := bufio.NewReader(c)
	var out []string
	for {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) && !isTimeout(err) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
				out = append(out, "error: "+err.Error())
			}
			return out
		}
		resp.Header.Del("Date")
		dump, err := httputil.DumpResponse(resp, true)
		resp.Body.Close()
		if err != nil {
			out = append(out, "error: "+err.Error())
			return out
		}
		out = append(out, string(dump))
	}
}

const post = "POST /ns/b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nCe-Id: 1\r\nContent-Length: 2\r\n\r\n{}"

// TestLeanAnswersAsNetHTTP sends the same bytes to servers with the lean path (building
// each request anew, or reusing pooled ones) and to one without, and wants the same
// responses: the requests the lean path takes and those it hands to net/http alike.
func TestLeanAnswersAsNetHTTP(t *testing.T) {
	lean := start(t, echo, WithMaxHeaderBytes(4<<10))
	reuse := start(t, echo, WithMaxHeaderBytes(4<<10), WithRequestReuse(true))
	std := start(t, echo, WithMaxHeaderBytes(4<<10), WithLeanHTTP1(false))
	big := strings.Repeat("x", 10<<10)
	huge := strings.Repeat("y", 100<<10)
	for _, tc := range []struct{ name, raw string }{
		{"lean POST", post},
		{"header spellings and repeats", "POST /ns/b HTTP/1.1\r\nhost: h\r\nce-id: 1\r\nCE-SOURCE:  s \r\nX-Odd-name: a\r\nx-odd-NAME: b\r\ncontent-length: 0\r\nConnection: keep-alive\r\n\r\n"},
		{"query", "POST /ns/b?x=1&y=%20 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nz"},
		{"percent-encoded path", "POST /ns/b%2Fc HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
		{"pipelined", post + post + "POST /ns/c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"},
		{"fewer headers than the request before", "POST /ns/b?q HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\nX-B: 3\r\nX-C: 4\r\nContent-Length: 0\r\n\r\n" + post +
			"POST /ns/c HTTP/1.1\r\nHost: h\r\nX-A: 5\r\nContent-Length: 0\r\n\r\n"},
		{"lean then net/http on one connection", post + "GET /x HTTP/1.1\r\nHost: h\r\n\r\n" + post},
		{"body beyond the pooled buffer", "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 10240\r\n\r\n" + big + post},
		{"body beyond the lean limit", "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 102400\r\n\r\n" + huge + post},
		{"chunked", "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{"expect continue", "POST /b HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"},
		{"connection close", "POST /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 0\r\n\r\n" + post},
		{"HTTP/1.0", "POST /b HTTP/1.0\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
		{"no Host", "POST /b HTTP/1.1\r\nContent-Length: 0\r\n\r\n"},
		{"two Hosts", "POST /b HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n"},
		{"bad Host", "POST /b HTTP/1.1\r\nHost: a b\r\nContent-Length: 0\r\n\r\n"},
		{"two Content-Lengths", "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nz"},
		{"bad Content-Length", "POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\nz"},
		{"bad header name", "POST /b HTTP/1.1\r\nHost: h\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n"},
		{"control byte in a value", "POST /b HTTP/1.1\r\nHost: h\r\nX: a\x01b\r\nContent-Length: 0\r\n\r\n"},
		{"bare LF", "POST /b HTTP/1.1\nHost: h\nContent-Length: 0\n\n"},
		{"obs-fold", "POST /b HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n"},
		{"absolute form", "POST http://h/b HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
		{"headers beyond the limit", "POST /b HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 9<<10) + "\r\nContent-Length: 0\r\n\r\n"},
		{"not HTTP", "HELLO\r\n\r\n"},
		{"flushed with a Content-Length", "POST /flush HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n" + post},
		{"flushed without one (chunked)", "POST /chunk HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n" + post},
		{"a large body without Content-Length", "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n" + post},
		{"error with a body", "POST /status/413 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"},
		{"no body allowed", "POST /status/204 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n" + post},
		{"handler panics", "POST /panic HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n" + post},
		{"handler closes", "POST /close HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n" + post},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := exchange(t, std.Addr().String(), tc.raw)
			for name, s := range map[string]*Server{"lean path": lean, "lean path reusing requests": reuse} {
				if got := exchange(t, s.Addr().String(), tc.raw); !slices.Equal(got, want) {
					t.Errorf("%s answered\n%q\nnet/http answered\n%q", name, got, want)
				}
			}
			if len(want) == 0 && tc.name != "handler panics" {
				t.Errorf("no answer at all: the case tests nothing")
			}
		})
	}
}

// TestLeanShutdown: Shutdown closes idle lean connections at once, lets a request in
// progress finish and answer, and Serve returns http.ErrServerClosed.
func TestLeanShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusAccepted)
	})
	s := newServer(t, h)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	idle := dialDo(t, s.Addr().String(), post) // served, then idle
	busy, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Errorf("idle connection after Shutdown: read %d, %v; want it closed", n, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Errorf("request in progress at Shutdown: %v, %v; want 202", resp, err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want http.ErrServerClosed", err)
	}
}

// dialDo sends raw on a new connection, reads one response and returns the connection.
func dialDo(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, raw)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return c
}

// TestLeanConnectionCap: the lean path keeps WithMaxConns, handed-off connections
// included: beyond the cap a connection waits to be accepted until one closes (while
// none is idle: TestIdleConnectionReclaimed).
func TestLeanConnectionCap(t *testing.T) {
	s := start(t, echo, WithMaxConns(2))
	a := dialDo(t, s.Addr().String(), post)
	b := dialDo(t, s.Addr().String(), "GET / HTTP/1.1\r\nHost: h\r\n\r\n") // handed off
	// Both busy: a next request begun on each.
	io.WriteString(a, "POST /b HTTP/1.1\r\n")
	io.WriteString(b, "GET / HTTP/1.1\r\n")
	waitFor(t, "both connections busy", func() bool { return idleConns(s) == 0 })
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, post)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("third connection with a cap of 2: %v; want no answer yet", err)
	}
	b.Close()
	a.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("third connection once the others closed: %v, %v; want 202", resp, err)
	}
}

// TestLeanIdleTimeout: an idle lean connection is closed after the idle timeout, and a
// request sent slowly after the read-header timeout.
func TestLeanIdleTimeout(t *testing.T) {
	s := start(t, echo, WithIdleTimeout(300*time.Millisecond), WithReadHeaderTimeout(300*time.Millisecond))
	for _, tc := range []struct {
		name string
		send string
	}{{"idle", ""}, {"half a head", "POST /b HTTP/1.1\r\nHost: h\r\n"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialDo(t, s.Addr().String(), post)
			io.WriteString(c, tc.send)
			begin := time.Now()
			c.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang: never closed
			_, err := c.Read(make([]byte, 1))
			if err == nil || isTimeout(err) {
				t.Fatalf("read after %v: %v; want the server to close the connection", time.Since(begin), err)
			}
		})
	}
}

// TestLeanShutdownBeforeServe: Serve after Shutdown returns http.ErrServerClosed at once.
func TestLeanShutdownBeforeServe(t *testing.T) {
	s := newServer(t, echo)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve after Shutdown: %v, want http.ErrServerClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve after Shutdown did not return")
	}
}

// TestLeanConnContext: each lean connection's requests carry the context
// WithConnContext gave that connection, and its function is called when the connection
// waits for a request with nothing read, when it is handed to net/http and when it
// closes; not between requests read together.
func TestLeanConnContext(t *testing.T) {
	type connKey struct{}
	var mu sync.Mutex
	idles := map[int]int{} // connection number → calls of its function
	conns := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := r.Context().Value(connKey{}).(int)
		mu.Lock()
		calls := idles[n]
		mu.Unlock()
		fmt.Fprintf(w, "%d %d", n, calls)
	})
	s := start(t, h, WithConnContext(func(ctx context.Context) (context.Context, func()) {
		mu.Lock()
		defer mu.Unlock()
		conns++
		n := conns
		return context.WithValue(ctx, connKey{}, n), func() {
			mu.Lock()
			idles[n]++
			mu.Unlock()
		}
	}))
	calls := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return idles[n]
	}
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	dial := func() conn {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return conn{c, bufio.NewReader(c)}
	}
	// answers writes raw on c and returns the bodies of the first n answers: the
	// connection's number and the calls of its function when each was served.
	answers := func(c conn, raw string, n int) (conn int, calls []int) {
		t.Helper()
		io.WriteString(c.c, raw)
		for range n {
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil {
				t.Fatal(err)
			}
			var k, m int
			if _, err := fmt.Fscanf(resp.Body, "%d %d", &k, &m); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			conn, calls = k, append(calls, m)
		}
		return conn, calls
	}
	c1, c2 := dial(), dial()
	n1, got := answers(c1, post+post, 2) // read together: no wait between them
	if n1 == 0 || got[0] != got[1] {
		t.Fatalf("connection 1, two requests written at once: connection %d, calls %v; want a connection value and no call between", n1, got)
	}
	n2, _ := answers(c2, post, 1)
	if n2 == 0 || n2 == n1 {
		t.Fatalf("connection 2's value %d, connection 1's %d: want distinct", n2, n1)
	}
	// Connection 1 then waits for a request with nothing read.
	sluicetest.Eventually(t, 5*time.Second, "connection 1's idle callback (waiting with nothing read)", func() bool { return calls(n1) > got[1] })
	if n, again := answers(c1, post, 1); n != n1 || again[0] <= got[1] {
		t.Errorf("connection 1 after waiting: connection %d, calls %v; want %d, more than %d", n, again, n1, got[1])
	}
	// Handed to net/http (a GET): called, and net/http's requests carry no such value.
	before := calls(n2)
	if n, _ := answers(c2, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", 1); n != 0 {
		t.Errorf("a GET served by net/http carries connection value %d, want none", n)
	}
	sluicetest.Eventually(t, 5*time.Second, "connection 2's idle callback (handed to net/http)", func() bool { return calls(n2) > before })
	// Closed: called.
	before = calls(n1)
	c1.c.Close()
	sluicetest.Eventually(t, 5*time.Second, "connection 1's idle callback (closed)", func() bool { return calls(n1) > before })
}
