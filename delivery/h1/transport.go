package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-broker/sluice/internal/httpascii"
)

// Transport is the http.RoundTripper Sluice's deliveries use for http:// subscribers: a
// keep-alive HTTP/1.1 client that writes each request in one system call and reads the
// response on the caller's goroutine with http.ReadResponse. net/http's Transport hands
// every request to a per-connection writer goroutine and every response back from a
// reader goroutine; on loopback at tens of thousands of deliveries per second those
// hand-offs cost more than the HTTP itself (BenchmarkTransport in this package compares
// the two). Other schemes (https) go to the fallback transport.
//
// Connections are kept per host:port. At most maxConns are open to one host at once
// (idle or in use); a request beyond that waits, under its context, for one to come
// free. At most maxIdle are kept idle; an idle connection is closed once unused for
// idleTimeout, by a janitor goroutine that runs only while idle connections exist, and at
// once by CloseIdleConnections or CloseIdleTo (a retired trigger's subscriber). A request
// that fails on a reused connection before any response byte arrives is sent once more
// on a new connection: the usual cause is a server that closed the idle connection;
// should the server have received it after all, the subscriber sees the event twice,
// which at-least-once delivery allows. Informational (1xx) responses before the final one
// are skipped. Response bodies must be read to EOF and closed for the connection to be
// reused.
//
// Why not the load generator's client (loadtest/load/rawhttp.go)? Both write a request
// in one system call, but the needs differ: delivery must hand the dispatcher a full
// *http.Response (Retry-After, a reply's ce- headers and body) built from an
// *http.Request, while the generator writes pre-assembled request bytes and parses only
// the status and framing of answers it throws away, which keeps it cheaper than what it
// measures. One shared parser would make the generator pay for headers it never reads.
//
// Safe for concurrent use.
type Transport struct {
	dialer      net.Dialer
	fallback    http.RoundTripper
	maxIdle     int
	maxConns    int
	idleTimeout time.Duration

	mu      sync.Mutex
	hosts   map[string]*h1Host // host:port → its connections
	janitor bool               // the janitor goroutine runs
	kick    chan struct{}      // wakes the janitor early (CloseIdleConnections)
	bufs    sync.Pool          // *[]byte request buffers
}

// h1Host is the connection pool of one host:port. Guarded by Transport.mu.
type h1Host struct {
	idle []*h1Conn     // most recent last
	open int           // connections open: idle, in use or being dialed
	free chan struct{} // one-slot signal: a connection came free (idle or closed)
}

type h1Conn struct {
	c        net.Conn
	head     headGuard // between c and br: bounds the response heads read
	br       *bufio.Reader
	host     string
	lastUsed time.Time

	// The context whose end interrupts the connection's I/O (watch): registered once
	// for as long as the same context uses the connection, not at every exchange.
	watchMu sync.Mutex
	watched context.Context
	unwatch func() bool
}

// watch makes the end of ctx interrupt pc's I/O, through its deadline, from now until
// pc is closed or watches another context. Called by the connection's user only.
func (pc *h1Conn) watch(ctx context.Context) {
	if pc.watched == ctx {
		return
	}
	pc.watchMu.Lock()
	defer pc.watchMu.Unlock()
	if pc.unwatch != nil {
		pc.unwatch()
	}
	pc.watched = ctx
	pc.unwatch = context.AfterFunc(ctx, func() {
		pc.watchMu.Lock()
		defer pc.watchMu.Unlock()
		if pc.watched == ctx { // not handed on to another context meanwhile
			pc.c.SetDeadline(time.Unix(1, 0))
		}
	})
}

// interrupted reports whether the context pc watches has ended: its I/O may have been
// cut short, and it is not to be reused.
func (pc *h1Conn) interrupted() bool { return pc.watched != nil && pc.watched.Err() != nil }

// close closes the connection and forgets the context it watched.
func (pc *h1Conn) close() {
	pc.watchMu.Lock()
	if pc.unwatch != nil {
		pc.unwatch()
	}
	pc.watched, pc.unwatch = nil, nil
	pc.watchMu.Unlock()
	pc.c.Close()
}

// Options configure a Transport.
type Options struct {
	// Dialer dials the connections of http:// requests; its Deadline is set per request.
	Dialer net.Dialer
	// Fallback carries every request whose scheme is not http (https).
	Fallback http.RoundTripper
	// MaxIdleConnsPerHost bounds the idle connections kept to one host:port.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost bounds the connections open to one host:port, idle or in use; a
	// request beyond it waits for one to come free.
	MaxConnsPerHost int
	// IdleTimeout is how long an unused connection is kept.
	IdleTimeout time.Duration
}

// New returns a Transport configured by o.
func New(o Options) *Transport {
	t := &Transport{dialer: o.Dialer, fallback: o.Fallback, maxIdle: o.MaxIdleConnsPerHost, maxConns: o.MaxConnsPerHost, idleTimeout: o.IdleTimeout,
		hosts: make(map[string]*h1Host), kick: make(chan struct{}, 1)}
	t.bufs.New = func() any { b := make([]byte, 0, 8<<10); return &b }
	return t
}

// RoundTrip implements http.RoundTripper: the request's context bounds it and its
// deadline, if any, is the connection's.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.fallback.RoundTrip(req)
	}
	dl, _ := req.Context().Deadline()
	return t.RoundTripUntil(req.Context(), req, nil, dl)
}

// RoundTripUntil sends req, an http:// request whose own context is not looked at, and
// reads the response head, until ctx ends or dl (if not zero) passes: dl is the
// connection's deadline, so a caller needs no context or timer of its own per request.
// When header is not nil the request's header fields are those it yields (each name
// once) and req.Header is not read; otherwise they are req.Header's. Host,
// Content-Length and User-Agent are the transport's own.
func (t *Transport) RoundTripUntil(ctx context.Context, req *http.Request, header func(yield func(name, value string)), dl time.Time) (*http.Response, error) {
	host := hostPort(req.URL)
	bp := t.bufs.Get().(*[]byte)
	buf, err := appendRequest((*bp)[:0], req, header)
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
		pc, reused, err := t.get(ctx, host, dl)
		if err != nil {
			return nil, err
		}
		resp, sentNothing, err := t.exchange(ctx, dl, req, pc, buf)
		if err == nil {
			return resp, nil
		}
		t.close(pc)
		if reused && sentNothing && attempt == 0 && ctx.Err() == nil {
			continue // a keep-alive connection the server had closed: once more on a new one
		}
		return nil, err
	}
}

// exchange writes the request and reads the response head on pc, with dl (zero: none)
// as the connection's deadline. sentNothing reports a failure before any byte of
// response arrived.
func (t *Transport) exchange(ctx context.Context, dl time.Time, req *http.Request, pc *h1Conn, buf []byte) (resp *http.Response, sentNothing bool, err error) {
	// Cancellation (shutdown) interrupts the I/O through the deadline: once ctx has
	// ended, the deadline set here is moved to the past.
	pc.watch(ctx)
	pc.c.SetDeadline(dl)
	if _, err := pc.c.Write(buf); err != nil {
		return nil, true, ctxErr(ctx, dl, err)
	}
	pc.head.arm() // nothing is buffered: a connection is reused only with nothing unread
	if _, err := pc.br.Peek(1); err != nil {
		return nil, true, ctxErr(ctx, dl, err)
	}
	if resp = leanResponse(pc.br); resp == nil {
		resp, err = readGuardedResponse(pc.br, &pc.head, req)
	}
	pc.head.disarm()
	if err != nil {
		return nil, false, ctxErr(ctx, dl, err)
	}
	resp.Body = &h1Body{rc: resp.Body, t: t, pc: pc, keep: !resp.Close, eof: resp.Body == http.NoBody}
	return resp, false, nil
}

// max1xx bounds the informational responses skipped before the final one, as net/http
// does, so that a misbehaving server cannot keep a delivery reading forever.
const max1xx = 5

// readFinalResponse reads the response to req, skipping informational (1xx) responses
// such as 100 Continue or 103 Early Hints; next, when not nil, is called after each one
// before the next head is read (the head guard's rearm). 101 Switching Protocols is an
// error: a delivery never asks to upgrade.
func readFinalResponse(br *bufio.Reader, req *http.Request, next func() error) (*http.Response, error) {
	for i := 0; ; i++ {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode >= 200 || resp.StatusCode < 100:
			return resp, nil
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, fmt.Errorf("delivery: the subscriber switched protocols (101)")
		case i >= max1xx:
			return nil, fmt.Errorf("delivery: more than %d informational responses", max1xx)
		}
		if next != nil {
			if err := next(); err != nil {
				return nil, err
			}
		}
	}
}

// readGuardedResponse is readFinalResponse on br, which reads through g (armed): after
// an informational response g guards the next head, and once g tripped its error is the
// one returned, whatever the parser made of the bytes it was given before.
func readGuardedResponse(br *bufio.Reader, g *headGuard, req *http.Request) (*http.Response, error) {
	resp, err := readFinalResponse(br, req, func() error {
		b, _ := br.Peek(br.Buffered())
		return g.rearm(b)
	})
	if err != nil && g.err != nil {
		return nil, g.err
	}
	return resp, err
}

// ctxErr prefers the context's error (cancellation) to the I/O error it caused, and
// reports the connection's deadline dl passing as context.DeadlineExceeded.
func ctxErr(ctx context.Context, dl time.Time, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	var ne net.Error
	if !dl.IsZero() && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// get returns an idle connection to host, or dials one if fewer than maxConns are open,
// or waits for one to come free until ctx ends or dl (if not zero) passes.
func (t *Transport) get(ctx context.Context, host string, dl time.Time) (pc *h1Conn, reused bool, err error) {
	var expired <-chan time.Time // made on the first wait only
	for {
		t.mu.Lock()
		h := t.hosts[host]
		if h == nil {
			h = &h1Host{free: make(chan struct{}, 1)}
			t.hosts[host] = h
		}
		now := time.Now()
		for n := len(h.idle); n > 0; n = len(h.idle) {
			pc = h.idle[n-1]
			h.idle[n-1] = nil
			h.idle = h.idle[:n-1]
			if now.Sub(pc.lastUsed) < t.idleTimeout {
				t.passOn(h)
				t.mu.Unlock()
				return pc, true, nil
			}
			h.open--
			pc.close()
		}
		if h.open < t.maxConns {
			h.open++
			t.mu.Unlock()
			d := t.dialer
			d.Deadline = dl
			c, err := d.DialContext(ctx, "tcp", host)
			if err != nil {
				t.release(host)
				return nil, false, ctxErr(ctx, dl, err)
			}
			pc := &h1Conn{c: c, host: host}
			pc.head.r = c
			pc.br = bufio.NewReaderSize(&pc.head, 8<<10)
			return pc, false, nil
		}
		free := h.free
		t.mu.Unlock()
		if expired == nil && !dl.IsZero() {
			tm := time.NewTimer(time.Until(dl))
			defer tm.Stop()
			expired = tm.C
		}
		select {
		case <-free:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-expired:
			return nil, false, fmt.Errorf("%w: no connection to %s came free", context.DeadlineExceeded, host)
		}
	}
}

// passOn wakes another waiter if the host still has an idle connection or room to dial;
// called with t.mu held after a waiter took what woke it.
func (t *Transport) passOn(h *h1Host) {
	if len(h.idle) > 0 || h.open < t.maxConns {
		signal(h.free)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// close closes pc and frees its place in its host's pool.
func (t *Transport) close(pc *h1Conn) {
	pc.close()
	t.release(pc.host)
}

// release frees one connection's place in host's pool.
func (t *Transport) release(host string) {
	t.mu.Lock()
	if h := t.hosts[host]; h != nil {
		h.open--
		t.forgetIfEmpty(host, h)
		signal(h.free)
	}
	t.mu.Unlock()
}

// forgetIfEmpty drops an unused host's pool, so that a subscriber that went away costs
// nothing; called with t.mu held.
func (t *Transport) forgetIfEmpty(host string, h *h1Host) {
	if h.open == 0 && len(h.idle) == 0 && len(h.free) == 0 {
		delete(t.hosts, host)
	}
}

// put returns pc to the idle pool, or closes it when the pool is full.
func (t *Transport) put(pc *h1Conn) {
	pc.lastUsed = time.Now()
	t.mu.Lock()
	h := t.hosts[pc.host]
	if h != nil && len(h.idle) < t.maxIdle {
		h.idle = append(h.idle, pc)
		signal(h.free)
		t.startJanitor()
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.close(pc)
}

// startJanitor starts the goroutine that closes expired idle connections, unless it
// runs; called with t.mu held. It exits by itself when no idle connection is left.
func (t *Transport) startJanitor() {
	if t.janitor {
		return
	}
	t.janitor = true
	go t.sweep()
}

// sweep closes idle connections unused for idleTimeout, every idleTimeout/2 or when
// kicked, until none is left.
func (t *Transport) sweep() {
	tick := time.NewTicker(max(t.idleTimeout/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-t.kick:
		}
		var expired []*h1Conn
		now := time.Now()
		t.mu.Lock()
		left := 0
		for host, h := range t.hosts {
			keep := h.idle[:0]
			for _, pc := range h.idle {
				if now.Sub(pc.lastUsed) >= t.idleTimeout {
					expired = append(expired, pc)
					h.open--
				} else {
					keep = append(keep, pc)
				}
			}
			clear(h.idle[len(keep):])
			h.idle = keep
			left += len(keep)
			if len(expired) > 0 {
				signal(h.free)
			}
			t.forgetIfEmpty(host, h)
		}
		if left == 0 {
			t.janitor = false
		}
		t.mu.Unlock()
		for _, pc := range expired {
			pc.close()
		}
		if left == 0 {
			return
		}
	}
}

// closeIdle closes the idle connections of the hosts keep selects.
func (t *Transport) closeIdle(match func(host string) bool) {
	var idle []*h1Conn
	t.mu.Lock()
	for host, h := range t.hosts {
		if !match(host) {
			continue
		}
		idle = append(idle, h.idle...)
		h.open -= len(h.idle)
		clear(h.idle)
		h.idle = h.idle[:0]
		signal(h.free)
		t.forgetIfEmpty(host, h)
	}
	t.mu.Unlock()
	for _, pc := range idle {
		pc.close()
	}
	signal(t.kick) // the janitor, if it runs, sees whether anything is left
}

// CloseIdleConnections closes the idle connections (http.Client calls it by name).
func (t *Transport) CloseIdleConnections() {
	t.closeIdle(func(string) bool { return true })
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// CloseIdleTo closes the idle connections to rawURL's host and port (for an https URL,
// the fallback's idle connections): a caller that will send there no more holds no
// connection until the idle timeout.
func (t *Transport) CloseIdleTo(rawURL string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return
	}
	if u.Scheme != "http" {
		if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
			ci.CloseIdleConnections()
		}
		return
	}
	host := hostPort(u)
	t.closeIdle(func(h string) bool { return h == host })
}

// hostPort is the host:port key of u's pool.
func hostPort(u *url.URL) string {
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}

// h1Body is a response body that gives its connection back when read to EOF and closed.
type h1Body struct {
	rc   io.ReadCloser
	t    *Transport
	pc   *h1Conn
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
	if b.eof && b.keep && !b.pc.interrupted() && b.pc.br.Buffered() == 0 {
		b.t.put(b.pc)
		return nil
	}
	b.t.close(b.pc)
	return nil
}

// maxPooledRequest is the largest request buffer kept for reuse.
const maxPooledRequest = 64 << 10

var errBadRequest = errors.New("delivery: request cannot be sent over HTTP/1.1")

// appendRequest writes req's request line, headers and body into dst: the headers are
// those header yields when it is not nil, req.Header's otherwise. Bodies are expected
// small (events): the whole request goes out in one write.
func appendRequest(dst []byte, req *http.Request, header func(yield func(name, value string))) ([]byte, error) {
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
	var bad error
	line := func(k, v string) {
		switch {
		case bad != nil:
		case !validHeaderName(k):
			bad = fmt.Errorf("%w: header name %q", errBadRequest, k)
		case !httpascii.ValidValue(v):
			// Header injection. Never an event's: event.EachHeader percent-encodes
			// control characters, and Validate refuses them in datacontenttype.
			bad = fmt.Errorf("%w: header %s has a control character", errBadRequest, k)
		default:
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	if header != nil {
		header(line)
	} else {
		for k, vs := range req.Header {
			for _, v := range vs {
				line(k, v)
			}
		}
	}
	if bad != nil {
		return nil, bad
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
