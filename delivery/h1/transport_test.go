package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

func newTestH1() *Transport {
	return New(Options{Dialer: net.Dialer{Timeout: time.Second}, Fallback: http.DefaultTransport, MaxIdleConnsPerHost: 16, MaxConnsPerHost: 64, IdleTimeout: time.Minute})
}

func post(t *testing.T, rt http.RoundTripper, ctx context.Context, url string, body string, h http.Header) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// countConns counts the TCP connections a test server accepts.
func countConns(s *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func TestH1TransportKeepAliveAndFraming(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Ce-Id") != "1" || r.Host == "" || r.ContentLength != int64(len(body)) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch r.URL.Query().Get("mode") {
		case "chunked":
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("part1-"))
			w.(http.Flusher).Flush()
			w.Write(body)
		case "empty":
			w.WriteHeader(http.StatusAccepted)
		default:
			w.Write(body)
		}
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	h1 := newTestH1()
	defer h1.CloseIdleConnections()
	h := http.Header{"Ce-Id": {"1"}}
	for i := 0; i < 50; i++ {
		for _, tt := range []struct{ mode, want string }{{"", "hello"}, {"chunked", "part1-hello"}, {"empty", ""}} {
			resp, body, err := post(t, h1, context.Background(), srv.URL+"/path?mode="+tt.mode, "hello", h)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode >= 300 || body != tt.want {
				t.Fatalf("mode %q: %d %q, want %q", tt.mode, resp.StatusCode, body, tt.want)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("150 sequential requests used %d connections, want 1 (keep-alive)", n)
	}
}

func TestH1TransportServerClosesConnections(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%2 == 0 {
			w.Header().Set("Connection", "close")
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	h1 := newTestH1()
	for i := 0; i < 10; i++ {
		if resp, _, err := post(t, h1, context.Background(), srv.URL, "x", nil); err != nil || resp.StatusCode != 202 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
	}
	if n := conns.Load(); n != 5 {
		t.Errorf("Connection: close every second response: %d connections, want 5", n)
	}
	// The server drops its idle connections: the next request finds the pooled one dead
	// and must succeed on a new one.
	srv.Config.SetKeepAlivesEnabled(false)
	srv.Config.SetKeepAlivesEnabled(true)
	time.Sleep(50 * time.Millisecond)
	if resp, _, err := post(t, h1, context.Background(), srv.URL, "x", nil); err != nil || resp.StatusCode != 202 {
		t.Fatalf("after the server closed the idle connection: %v %v", resp, err)
	}
}

func TestH1TransportTimeoutAndCancel(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	h1 := newTestH1()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := post(t, h1, ctx, srv.URL, "x", nil)
	// The server never answers: the bound is on a hang, not on the machine's speed.
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 20*time.Second {
		t.Fatalf("deadline: err %v after %s", err, time.Since(start))
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel2)
	start = time.Now()
	_, _, err = post(t, h1, ctx2, srv.URL, "x", nil)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 20*time.Second {
		t.Fatalf("cancel: err %v after %s", err, time.Since(start))
	}
}

// TestH1TransportConnOutlivesItsContext: a connection a context used, which ended
// while the connection sat idle, serves the next context's requests, uninterrupted.
func TestH1TransportConnOutlivesItsContext(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	h1 := newTestH1()
	first, cancel := context.WithCancel(context.Background())
	if _, _, err := post(t, h1, first, srv.URL, "x", nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	time.Sleep(20 * time.Millisecond) // the end of first reaches the idle connection
	for i := range 3 {
		if resp, _, err := post(t, h1, context.Background(), srv.URL, "x", nil); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("request %d after the first context ended: %v", i, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want the first one throughout", n)
	}
}

func TestH1TransportRejectsHeaderInjection(t *testing.T) {
	h1 := newTestH1()
	for _, h := range []http.Header{{"X-A": {"v\r\nX-Evil: 1"}}, {"Bad Name": {"v"}}} {
		if _, _, err := post(t, h1, context.Background(), "http://127.0.0.1:1/", "x", h); !errors.Is(err, errBadRequest) {
			t.Errorf("%v: err = %v, want errBadRequest", h, err)
		}
	}
}

func TestH1TransportHTTPSFallback(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(202) }))
	defer srv.Close()
	h1 := New(Options{Dialer: net.Dialer{}, Fallback: srv.Client().Transport, MaxIdleConnsPerHost: 4, MaxConnsPerHost: 4, IdleTimeout: time.Minute})
	if resp, _, err := post(t, h1, context.Background(), srv.URL, "x", nil); err != nil || resp.StatusCode != 202 {
		t.Fatalf("https through the fallback: %v %v", resp, err)
	}
}

// BenchmarkTransport compares the delivery transport with net/http's on the same
// loopback server, a 2 KiB POST and an empty 202 each: the reason Transport exists.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 2048)
	std := http.DefaultTransport.(*http.Transport).Clone()
	std.MaxIdleConnsPerHost = 64
	for _, tt := range []struct {
		name string
		rt   http.RoundTripper
	}{{"h1", New(Options{Fallback: std, MaxIdleConnsPerHost: 64, MaxConnsPerHost: 256, IdleTimeout: time.Minute})}, {"net-http", std}} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rd := bytes.NewReader(body)
				for pb.Next() {
					rd.Reset(body)
					req, _ := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(rd))
					req.ContentLength = int64(len(body))
					req.Header.Set("Ce-Id", "1")
					resp, err := tt.rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// rawServer accepts connections on 127.0.0.1 and answers every request it reads (head
// and Content-Length body) with answer; it counts connections.
func rawServer(t *testing.T, answer string) (url string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/", conns
}

func TestH1TransportSkipsInformationalResponses(t *testing.T) {
	tests := []struct {
		name     string
		answer   string
		want     int
		wantBody string
		wantErr  bool
	}{
		{"100 Continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok", 202, "ok", false},
		{"103 then 100", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "", false},
		{"101 is an error", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", 0, "", true},
		{"endless 1xx", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 10) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := rawServer(t, tt.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, body, err := post(t, newTestH1(), ctx, url, "x", nil)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %d, want an error", resp.StatusCode)
				}
				return
			}
			if err != nil || resp.StatusCode != tt.want || body != tt.wantBody {
				t.Fatalf("got %v %q %v, want %d %q", resp, body, err, tt.want, tt.wantBody)
			}
		})
	}
}

// TestH1TransportCapsConnectionsPerHost: with the cap at 2, 8 concurrent slow requests
// open 2 connections and all complete; a request whose context ends while waiting for a
// connection fails with the context's error.
func TestH1TransportCapsConnectionsPerHost(t *testing.T) {
	var inFlight, peak atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		io.Copy(io.Discard, r.Body)
		time.Sleep(50 * time.Millisecond)
		w.WriteHeader(http.StatusAccepted)
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	h1 := New(Options{Dialer: net.Dialer{Timeout: time.Second}, Fallback: http.DefaultTransport, MaxIdleConnsPerHost: 16, MaxConnsPerHost: 2, IdleTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			resp, _, err := post(t, h1, ctx, srv.URL, "x", nil)
			if err == nil && resp.StatusCode != http.StatusAccepted {
				err = errors.New(resp.Status)
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if c, p := conns.Load(), peak.Load(); c > 2 || p > 2 {
		t.Fatalf("%d connections, %d requests at once; the cap is 2", c, p)
	}
	// Hold both connections, then ask for a third with a short context.
	hold := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-hold
		w.WriteHeader(http.StatusAccepted)
	}))
	defer slow.Close()
	defer close(hold)
	for i := 0; i < 2; i++ {
		go post(t, h1, ctx, slow.URL, "x", nil)
	}
	time.Sleep(100 * time.Millisecond)
	short, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer scancel()
	if _, _, err := post(t, h1, short, slow.URL, "x", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third request at the cap = %v, want DeadlineExceeded", err)
	}
}

// idleCount is the number of idle connections the transport keeps.
func idleCount(t *Transport) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, h := range t.hosts {
		n += len(h.idle)
	}
	return n
}

func janitorRuns(t *Transport) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.janitor
}

// TestH1TransportIdleConnections: idle connections close after the idle timeout with no
// request looking at them, the janitor then exits; CloseIdleTo closes one host's only.
func TestH1TransportIdleConnections(t *testing.T) {
	a, _ := rawServer(t, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
	b, _ := rawServer(t, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
	h1 := New(Options{Dialer: net.Dialer{Timeout: time.Second}, Fallback: http.DefaultTransport, MaxIdleConnsPerHost: 16, MaxConnsPerHost: 16, IdleTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	for _, u := range []string{a, b} {
		if _, _, err := post(t, h1, ctx, u, "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := idleCount(h1); n != 2 || !janitorRuns(h1) {
		t.Fatalf("%d idle, janitor %v; want 2 idle and the janitor running", n, janitorRuns(h1))
	}
	deadline := time.Now().Add(5 * time.Second)
	for idleCount(h1) > 0 || janitorRuns(h1) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %d idle, janitor %v", idleCount(h1), janitorRuns(h1))
		}
		time.Sleep(20 * time.Millisecond)
	}

	h1.idleTimeout = time.Minute
	for _, u := range []string{a, b} {
		if _, _, err := post(t, h1, ctx, u, "x", nil); err != nil {
			t.Fatal(err)
		}
	}
	h1.CloseIdleTo(a + "some/path")
	if n := idleCount(h1); n != 1 {
		t.Fatalf("after CloseIdleTo(a): %d idle, want b's 1", n)
	}
	h1.CloseIdleConnections()
	if n := idleCount(h1); n != 0 {
		t.Fatalf("after CloseIdleConnections: %d idle", n)
	}
	deadline = time.Now().Add(5 * time.Second)
	for janitorRuns(h1) {
		if time.Now().After(deadline) {
			t.Fatal("the janitor runs on with no idle connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestH1TransportDeadlineWithoutContext: an attempt's deadline given apart from its
// context (send's way) bounds a slow response and the wait for a free connection, and
// both fail with context.DeadlineExceeded, as a context's deadline would.
func TestH1TransportDeadlineWithoutContext(t *testing.T) {
	hold := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hold)
	capped := New(Options{Dialer: net.Dialer{Timeout: time.Second}, Fallback: http.DefaultTransport, MaxIdleConnsPerHost: 16, MaxConnsPerHost: 1, IdleTimeout: time.Minute})
	attempt := func(h1 *Transport) (time.Duration, error) {
		req, _ := http.NewRequest(http.MethodPost, slow.URL, strings.NewReader("x"))
		start := time.Now()
		resp, err := h1.RoundTripUntil(context.Background(), req, nil, start.Add(100*time.Millisecond))
		if err == nil {
			resp.Body.Close()
		}
		return time.Since(start), err
	}
	// The only connection capped allows is held by a request that never gets an answer.
	go func() {
		req, _ := http.NewRequest(http.MethodPost, slow.URL, strings.NewReader("x"))
		if resp, err := capped.RoundTripUntil(context.Background(), req, nil, time.Now().Add(10*time.Second)); err == nil {
			resp.Body.Close()
		}
	}()
	sluicetest.Eventually(t, 5*time.Second, "the held connection", func() bool { return openCount(capped) == 1 })
	for _, c := range []struct {
		name string
		h1   *Transport
	}{
		{"waiting for a free connection", capped},
		{"waiting for the response", newTestH1()}, // room to dial: the wait is for the slow server
	} {
		took, err := attempt(c.h1)
		// Never answered: at least the deadline, and any more only bounds a hang.
		if !errors.Is(err, context.DeadlineExceeded) || took < 90*time.Millisecond || took > 20*time.Second {
			t.Fatalf("%s: err %v after %s, want DeadlineExceeded after 100ms", c.name, err, took)
		}
	}
}

// openCount is the number of connections the transport has open or is dialing.
func openCount(t *Transport) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, h := range t.hosts {
		n += h.open
	}
	return n
}
