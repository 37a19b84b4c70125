package delivery

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// h1Transport is the http.RoundTripper deliveries use for http:// subscribers: a
// keep-alive HTTP/1.1 client that writes each request in one system call and reads the
// response on the caller's goroutine with http.ReadResponse. net/http's Transport hands
// every request to a per-connection writer goroutine and every response back from a
// reader goroutine; on loopback at tens of thousands of deliveries per second those
// hand-offs cost more than the HTTP itself (BenchmarkTransport in this package compares
// the two). Other schemes (https) go to the fallback transport.
//
// Connections are kept per host, at most maxIdle idle each, and closed after idleTimeout
// unused. A request that fails on a reused connection before any response byte arrives
// is sent once more on a new connection: the usual cause is a server that closed the
// idle connection; should the server have received it after all, the subscriber sees
// the event twice, which at-least-once delivery allows. Response bodies must be read to
// EOF and closed for the connection to be reused.
//
// Safe for concurrent use.
type h1Transport struct {
	dialer      net.Dialer
	fallback    http.RoundTripper
	maxIdle     int
	idleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*h1Conn // host:port → idle connections, most recent last
	bufs sync.Pool            // *[]byte request buffers
}

type h1Conn struct {
	c        net.Conn
	br       *bufio.Reader
	host     string
	lastUsed time.Time
}

func newH1Transport(dialer net.Dialer, fallback http.RoundTripper, maxIdle int, idleTimeout time.Duration) *h1Transport {
	t := &h1Transport{dialer: dialer, fallback: fallback, maxIdle: maxIdle, idleTimeout: idleTimeout,
		idle: make(map[string][]*h1Conn)}
	t.bufs.New = func() any { b := make([]byte, 0, 8<<10); return &b }
	return t
}

// RoundTrip implements http.RoundTripper.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.fallback.RoundTrip(req)
	}
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	bp := t.bufs.Get().(*[]byte)
	buf, err := appendRequest((*bp)[:0], req)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cap(buf) <= maxPooledRequest { // a rare large event's buffer is left to the GC
			*bp = buf[:0]
			t.bufs.Put(bp)
		}
	}()
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.get(req.Context(), host)
		if err != nil {
			return nil, err
		}
		resp, sentNothing, err := t.exchange(req, pc, buf)
		if err == nil {
			return resp, nil
		}
		pc.c.Close()
		if reused && sentNothing && attempt == 0 && req.Context().Err() == nil {
			continue // a keep-alive connection the server had closed: once more on a new one
		}
		return nil, err
	}
}

// exchange writes the request and reads the response head on pc. sentNothing reports a
// failure before any byte of response arrived.
func (t *h1Transport) exchange(req *http.Request, pc *h1Conn, buf []byte) (resp *http.Response, sentNothing bool, err error) {
	ctx := req.Context()
	if dl, ok := ctx.Deadline(); ok {
		pc.c.SetDeadline(dl)
	} else {
		pc.c.SetDeadline(time.Time{})
	}
	// Cancellation without a deadline (shutdown) interrupts the I/O through the deadline.
	stop := context.AfterFunc(ctx, func() { pc.c.SetDeadline(time.Unix(1, 0)) })
	if _, err := pc.c.Write(buf); err != nil {
		stop()
		return nil, true, ctxErr(ctx, err)
	}
	if _, err := pc.br.Peek(1); err != nil {
		stop()
		return nil, true, ctxErr(ctx, err)
	}
	resp, err = http.ReadResponse(pc.br, req)
	if err != nil {
		stop()
		return nil, false, ctxErr(ctx, err)
	}
	resp.Body = &h1Body{rc: resp.Body, t: t, pc: pc, stop: stop, keep: !resp.Close, eof: resp.Body == http.NoBody}
	return resp, false, nil
}

// ctxErr prefers the context's error (deadline, cancellation) to the I/O error it caused.
// The connection's deadline is the context's, so its timeout may fire a moment before
// the context reports DeadlineExceeded.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// get returns an idle connection to host, or dials one.
func (t *h1Transport) get(ctx context.Context, host string) (pc *h1Conn, reused bool, err error) {
	now := time.Now()
	t.mu.Lock()
	for conns := t.idle[host]; len(conns) > 0; conns = t.idle[host] {
		pc = conns[len(conns)-1]
		conns[len(conns)-1] = nil
		t.idle[host] = conns[:len(conns)-1]
		if now.Sub(pc.lastUsed) < t.idleTimeout {
			t.mu.Unlock()
			return pc, true, nil
		}
		pc.c.Close()
	}
	t.mu.Unlock()
	c, err := t.dialer.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, false, err
	}
	return &h1Conn{c: c, br: bufio.NewReaderSize(c, 8<<10), host: host}, false, nil
}

// put returns pc to the idle pool, or closes it when the pool is full.
func (t *h1Transport) put(pc *h1Conn) {
	pc.lastUsed = time.Now()
	t.mu.Lock()
	if len(t.idle[pc.host]) < t.maxIdle {
		t.idle[pc.host] = append(t.idle[pc.host], pc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	pc.c.Close()
}

// CloseIdleConnections closes the idle connections (http.Client calls it by name).
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = make(map[string][]*h1Conn)
	t.mu.Unlock()
	for _, conns := range idle {
		for _, pc := range conns {
			pc.c.Close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// h1Body is a response body that gives its connection back when read to EOF and closed.
type h1Body struct {
	rc   io.ReadCloser
	t    *h1Transport
	pc   *h1Conn
	stop func() bool
	keep bool // the connection may be reused after this response
	eof  bool
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		b.keep = false
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	stopped := b.stop()
	if b.eof && b.keep && stopped && b.pc.br.Buffered() == 0 {
		b.t.put(b.pc)
		return nil
	}
	return b.pc.c.Close()
}

// maxPooledRequest is the largest request buffer kept for reuse.
const maxPooledRequest = 64 << 10

var errBadRequest = errors.New("delivery: request cannot be sent over HTTP/1.1")

// appendRequest writes req's request line, headers and body into dst. Bodies are
// expected small (events): the whole request goes out in one write.
func appendRequest(dst []byte, req *http.Request) ([]byte, error) {
	if req.ContentLength < 0 {
		return nil, fmt.Errorf("%w: unknown content length", errBadRequest)
	}
	dst = append(dst, req.Method...)
	dst = append(dst, ' ')
	dst = append(dst, req.URL.RequestURI()...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	dst = append(dst, host...)
	dst = append(dst, "\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, req.ContentLength, 10)
	dst = append(dst, "\r\nUser-Agent: sluice\r\n"...)
	for k, vs := range req.Header {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("%w: header name %q", errBadRequest, k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("%w: header %s has a control character", errBadRequest, k)
			}
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	dst = append(dst, "\r\n"...)
	if req.Body != nil && req.ContentLength > 0 {
		start, n := len(dst), int(req.ContentLength)
		dst = slices.Grow(dst, n)[:start+n]
		if _, err := io.ReadFull(req.Body, dst[start:]); err != nil {
			return nil, fmt.Errorf("delivery: reading the request body: %w", err)
		}
	}
	return dst, nil
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

// validHeaderValue rejects CR, LF and other control characters but tab (header
// injection); event.WriteHeaders percent-encodes them, so this never fires on events.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
