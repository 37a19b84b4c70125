package delivery

import (
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
)

func newTestH1() *h1Transport {
	return newH1Transport(net.Dialer{Timeout: time.Second}, http.DefaultTransport, 16, time.Minute)
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
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("deadline: err %v after %s", err, time.Since(start))
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel2)
	start = time.Now()
	_, _, err = post(t, h1, ctx2, srv.URL, "x", nil)
	if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("cancel: err %v after %s", err, time.Since(start))
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
	h1 := newH1Transport(net.Dialer{}, srv.Client().Transport, 4, time.Minute)
	if resp, _, err := post(t, h1, context.Background(), srv.URL, "x", nil); err != nil || resp.StatusCode != 202 {
		t.Fatalf("https through the fallback: %v %v", resp, err)
	}
}

// BenchmarkTransport compares the delivery transport with net/http's on the same
// loopback server, a 2 KiB POST and an empty 202 each: the reason h1Transport exists.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 2048)
	std := NewClient().Transport.(*h1Transport).fallback
	for _, tt := range []struct {
		name string
		rt   http.RoundTripper
	}{{"h1", NewClient().Transport}, {"net-http", std}} {
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
