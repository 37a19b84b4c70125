package httpserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/tlsfiles/tlstest"
)

// bodyReader reads a request's body as the broker's ingress does: a buffer of its
// Content-Length made at once, or the whole of a body of unknown length. entered counts
// the handlers that began.
func bodyReader(entered *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		var err error
		if r.ContentLength >= 0 {
			_, err = io.ReadFull(r.Body, make([]byte, r.ContentLength))
		} else {
			_, err = io.ReadAll(r.Body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
}

// waitFor polls cond until it holds; the timeout only bounds a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialAll opens n connections to s and writes head (and body, if any) on each.
func dialAll(t *testing.T, s *Server, n int, payload func(i int) string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, payload(i)); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns
}

// TestBodyBudgetHoldsUnfinishedBodies sends, on many connections, a body one byte
// short of its Content-Length: the bytes the server holds for them stay within the
// budget, and the requests beyond it are held before any buffer is made for them.
func TestBodyBudgetHoldsUnfinishedBodies(t *testing.T) {
	for _, tt := range []struct {
		name  string
		lean  bool
		size  int   // Content-Length
		limit int64 // the budget
		conns int
	}{
		{"net/http, 1 MiB bodies", false, 1 << 20, 4<<20 + 100, 12},
		{"lean, 1 MiB bodies (handed over)", true, 1 << 20, 4<<20 + 100, 12},
		{"lean, 60 KiB bodies", true, 60 << 10, 4*60<<10 + 100, 12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var entered atomic.Int64
			s := start(t, bodyReader(&entered), WithLeanHTTP1(tt.lean), WithMaxInflightBodyBytes(tt.limit))
			b := s.budget
			fit := int(tt.limit / int64(tt.size))
			body := strings.Repeat("x", tt.size-1)
			dialAll(t, s, tt.conns, func(int) string {
				return fmt.Sprintf("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", tt.size, body)
			})
			waitFor(t, fmt.Sprintf("%d bodies reserved and %d held", fit, tt.conns-fit), func() bool {
				return b.used.Load() == int64(fit*tt.size) && b.waiting.Load() == int64(tt.conns-fit)
			})
			if p := b.peak.Load(); p > tt.limit {
				t.Errorf("peak reserved %d bytes, over the budget of %d", p, tt.limit)
			}
			if got := b.waited.Load(); got != int64(tt.conns-fit) {
				t.Errorf("%d requests waited for room, want %d", got, tt.conns-fit)
			}
			if !tt.lean || tt.size > leanMaxRequest {
				if got := entered.Load(); got != int64(fit) {
					t.Errorf("%d handlers began, want the %d that fit", got, fit)
				}
			}
		})
	}
}

// TestBodyBudgetChunked sends chunked bodies that never end: what the handlers read of
// them stays within the budget, and some wait for room.
func TestBodyBudgetChunked(t *testing.T) {
	const limit, conns = 256 << 10, 8
	var entered atomic.Int64
	s := start(t, bodyReader(&entered), WithMaxInflightBodyBytes(limit))
	b := s.budget
	chunk := strings.Repeat("y", 10<<10)
	chunks := strings.Repeat(fmt.Sprintf("%x\r\n%s\r\n", len(chunk), chunk), 10) // 100 KiB, no last chunk
	dialAll(t, s, conns, func(int) string {
		return "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks
	})
	waitFor(t, "a chunked body waiting for room", func() bool { return b.waiting.Load() > 0 })
	if p := b.peak.Load(); p > limit {
		t.Errorf("peak reserved %d bytes, over the budget of %d", p, limit)
	}
}

// TestBodyBudgetRefuses answers 503 with Retry-After a request that found no room
// within the read timeout, and 413 at once one that could never fit.
func TestBodyBudgetRefuses(t *testing.T) {
	const limit = 1 << 20
	var entered atomic.Int64
	s := start(t, bodyReader(&entered), WithMaxInflightBodyBytes(limit), WithReadTimeout(200*time.Millisecond))
	for _, tt := range []struct {
		name       string
		held       int64 // reserved in the budget beforehand
		length     int
		status     int
		retryAfter string
		text       string
	}{
		{"no room", limit, 1000, http.StatusServiceUnavailable, "1", "--max-inflight-body-bytes"},
		{"never fits", 0, limit + 1, http.StatusRequestEntityTooLarge, "", "larger than the server's in-flight body budget of 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !s.budget.tryReserve(tt.held) {
				t.Fatal("cannot hold the budget")
			}
			defer s.budget.release(tt.held)
			c := dialAll(t, s, 1, func(int) string {
				return fmt.Sprintf("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", tt.length)
			})[0]
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			text, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || resp.Header.Get("Retry-After") != tt.retryAfter || !strings.Contains(string(text), tt.text) {
				t.Errorf("%d Retry-After %q %q; want %d Retry-After %q and %q", resp.StatusCode, resp.Header.Get("Retry-After"), text, tt.status, tt.retryAfter, tt.text)
			}
		})
	}
	if got := entered.Load(); got != 0 {
		t.Errorf("%d handlers began; want none", got)
	}
}

// TestBodyBudgetHTTP2 opens many streams on one TLS connection, each with a body one
// byte short: the handlers that began stay within the budget, the rest are held.
func TestBodyBudgetHTTP2(t *testing.T) {
	const size, streams = 1 << 20, 20
	const limit = 4*size + 100
	ca := tlstest.NewCA(t, "test-ca")
	cf, kf := ca.Server(t).Write(t, t.TempDir())
	var entered atomic.Int64
	s := start(t, bodyReader(&entered), WithTLS(cf, kf), WithMaxInflightBodyBytes(limit))
	c := tlsClient(ca, true)
	c.Timeout = 0
	var p http.Protocols
	p.SetHTTP2(true)
	c.Transport.(*http.Transport).Protocols = &p
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var protos sync.Map
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range streams {
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+s.Addr().String()+"/b", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		wg.Add(2)
		go func() {
			defer wg.Done()
			if resp, err := c.Do(req); err == nil {
				protos.Store(resp.Proto, true)
				resp.Body.Close()
			}
		}()
		go func() {
			defer wg.Done()
			_, _ = pw.Write(make([]byte, size-1))
			<-ctx.Done()
			pw.CloseWithError(ctx.Err())
		}()
	}
	b := s.budget
	waitFor(t, "4 streams reserved and the rest held", func() bool {
		return b.used.Load() == 4*size && b.waiting.Load() == streams-4
	})
	if got := entered.Load(); got != 4 {
		t.Errorf("%d handlers began, want the 4 that fit", got)
	}
	if p := b.peak.Load(); p > limit {
		t.Errorf("peak reserved %d bytes, over the budget of %d", p, limit)
	}
	protos.Range(func(k, _ any) bool {
		if k != "HTTP/2.0" {
			t.Errorf("served over %v, want HTTP/2.0", k)
		}
		return true
	})
}

// TestErrBodyBudgetStatusCode: a handler recognises the budget's refusal, however
// wrapped, by errors.As on an interface of its own (the broker does), and errors.Is
// still finds it.
func TestErrBodyBudgetStatusCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"bare", ErrBodyBudget},
		{"wrapped", fmt.Errorf("reading the body: %w", ErrBodyBudget)},
		{"wrapped twice", fmt.Errorf("event: %w", fmt.Errorf("body: %w", ErrBodyBudget))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc interface{ StatusCode() int }
			if !errors.As(tc.err, &sc) {
				t.Fatalf("errors.As(%v, StatusCode) = false", tc.err)
			}
			if got := sc.StatusCode(); got != http.StatusServiceUnavailable {
				t.Errorf("StatusCode() = %d, want 503", got)
			}
			if !errors.Is(tc.err, ErrBodyBudget) {
				t.Errorf("errors.Is(%v, ErrBodyBudget) = false", tc.err)
			}
			if want := "--max-inflight-body-bytes"; !strings.Contains(tc.err.Error(), want) {
				t.Errorf("error %q does not name %s", tc.err, want)
			}
		})
	}
}
