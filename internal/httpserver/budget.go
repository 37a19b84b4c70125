package httpserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The in-flight body budget (WithMaxInflightBodyBytes). Every request's body reserves
// its bytes here before anything buffers them — a Content-Length as a whole, a body of
// unknown length (chunked, or HTTP/2 without content-length) as each read asks for
// bytes — and gives them back when its handler returns. A client that sends a large
// Content-Length and then stalls holds only what it reserved, and all such clients
// together hold at most the budget: past it a request waits for room (its body stays in
// the socket, or in HTTP/2's flow-control window) up to the read timeout, and is then
// refused 503 with Retry-After; one that could never fit is refused 413 before its body
// is read. Both HTTP paths share it: the lean path reserves when it has parsed a head
// and hands a request it cannot reserve for to net/http, whose handler (guard) waits.

// ErrBodyBudget is the error a body of unknown length returns from Read when the bytes
// it asks for found no room in the in-flight body budget within the read timeout; a
// handler answers it 503 with Retry-After. Its StatusCode method returns 503, so a
// handler recognises it with errors.As on an interface{ StatusCode() int } of its own,
// without importing this package.
var ErrBodyBudget error = bodyBudgetError{}

// bodyBudgetError is ErrBodyBudget's type.
type bodyBudgetError struct{}

func (bodyBudgetError) Error() string {
	return "the server's in-flight body budget (--max-inflight-body-bytes) is full"
}

// StatusCode is the status a handler answers the request with: 503.
func (bodyBudgetError) StatusCode() int { return http.StatusServiceUnavailable }

// bodyReadChunk caps the bytes one Read of a body of unknown length reserves (and so
// reads) at once.
const bodyReadChunk = 64 << 10

// bodyBudget counts the bytes the bodies of requests in progress may hold.
type bodyBudget struct {
	limit   int64
	used    atomic.Int64
	peak    atomic.Int64 // the most used at once
	waiting atomic.Int64 // requests waiting for room now
	waited  atomic.Int64 // requests that waited for room, ever
	refused atomic.Int64 // requests refused for want of room (503), ever
	mu      sync.Mutex
	room    chan struct{} // closed (and replaced) when bytes are given back while someone waits; guarded by mu
}

func newBodyBudget(limit int64) *bodyBudget {
	return &bodyBudget{limit: limit, room: make(chan struct{})}
}

// tryReserve takes n bytes if they fit now.
func (b *bodyBudget) tryReserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

// reserve takes n bytes, waiting for room until ctx ends or d passes; false if none
// came.
func (b *bodyBudget) reserve(ctx context.Context, n int64, d time.Duration) bool {
	if b.tryReserve(n) {
		return true
	}
	if n > b.limit {
		return false
	}
	b.waited.Add(1)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		b.mu.Lock()
		room := b.room
		b.waiting.Add(1)
		b.mu.Unlock()
		// Counted as waiting before this look: a release after it closes room.
		ok := b.tryReserve(n)
		if !ok {
			select {
			case <-room:
			case <-t.C:
				b.waiting.Add(-1)
				return false
			case <-ctx.Done():
				b.waiting.Add(-1)
				return false
			}
		}
		b.waiting.Add(-1)
		if ok {
			return true
		}
	}
}

// release gives back n bytes and wakes the requests waiting for room.
func (b *bodyBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	if b.waiting.Load() > 0 {
		b.mu.Lock()
		close(b.room)
		b.room = make(chan struct{})
		b.mu.Unlock()
	}
}

// guard is the handler net/http serves: it refuses a request smuggling a second one
// (smuggle.go) and reserves the request's body in the budget before h sees it.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if smuggled(r) {
			w.Header().Set("Connection", "close")
			http.Error(w, "a request may not carry both Content-Length and Transfer-Encoding", http.StatusBadRequest)
			return
		}
		b := s.budget
		n := r.ContentLength
		switch {
		case n > b.limit:
			unread(w, r)
			http.Error(w, fmt.Sprintf("request body of %d bytes is larger than the server's in-flight body budget of %d bytes (--max-inflight-body-bytes)", n, b.limit), http.StatusRequestEntityTooLarge)
			return
		case n > 0:
			if !b.reserve(r.Context(), n, s.opts.readTimeout) {
				unread(w, r)
				s.refuseBusy(w)
				return
			}
			defer b.release(n)
		case n < 0 && r.Body != nil && r.Body != http.NoBody:
			body := &budgetBody{rc: r.Body, b: b, ctx: r.Context(), wait: s.opts.readTimeout}
			defer body.done()
			r.Body = body
		}
		h.ServeHTTP(w, r)
	})
}

// unread closes an HTTP/1.x connection after the answer to r, whose body is not read:
// net/http would read up to 256 KiB of it first to keep the connection. An HTTP/2
// stream's body is dropped with the stream (there, Connection: close would end the
// whole connection).
func unread(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
}

// refuseBusy answers 503 with Retry-After: the budget had no room for the request's
// body within the read timeout.
func (s *Server) refuseBusy(w http.ResponseWriter) {
	b := s.budget
	b.refused.Add(1)
	w.Header().Set("Retry-After", "1")
	http.Error(w, "server busy: the bodies of requests in progress hold "+strconv.FormatInt(b.used.Load(), 10)+" of the "+
		strconv.FormatInt(b.limit, 10)+" bytes allowed (--max-inflight-body-bytes); try again after Retry-After", http.StatusServiceUnavailable)
}

// budgetBody is a body of unknown length that reserves the bytes each Read asks for
// before reading them, and keeps those it read until done.
type budgetBody struct {
	rc   io.ReadCloser
	b    *bodyBudget
	ctx  context.Context
	wait time.Duration
	held int64
}

func (r *budgetBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return r.rc.Read(p)
	}
	p = p[:min(len(p), bodyReadChunk)]
	want := int64(len(p))
	if !r.b.reserve(r.ctx, want, r.wait) {
		r.b.refused.Add(1)
		return 0, ErrBodyBudget
	}
	n, err := r.rc.Read(p)
	r.b.release(want - int64(n))
	r.held += int64(n)
	return n, err
}

func (r *budgetBody) Close() error { return r.rc.Close() }

// done gives back the bytes read: the handler has returned.
func (r *budgetBody) done() {
	r.b.release(r.held)
	r.held = 0
}

// BodyBudgetStats is a snapshot of a server's in-flight body budget
// (WithMaxInflightBodyBytes).
type BodyBudgetStats struct {
	Limit   int64 // the budget, in bytes
	Used    int64 // bytes the bodies of the requests in progress hold now
	Peak    int64 // the most bytes held at once since the server started
	Waiting int64 // requests waiting for room now
	Waited  int64 // requests that waited for room, since the server started
	Refused int64 // requests refused 503 for want of room, since the server started
}

// BodyBudget returns a snapshot of the server's in-flight body budget.
func (s *Server) BodyBudget() BodyBudgetStats {
	b := s.budget
	return BodyBudgetStats{Limit: b.limit, Used: b.used.Load(), Peak: b.peak.Load(),
		Waiting: b.waiting.Load(), Waited: b.waited.Load(), Refused: b.refused.Load()}
}
