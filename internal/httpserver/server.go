// Package httpserver runs Sluice's HTTP server hardened against slow and greedy clients:
// timeouts on every phase of a request, a cap on header bytes and on concurrent
// connections, and optionally TLS (HTTP/1.1 and HTTP/2, TLS 1.2 at least, Go's default
// cipher suites) with a certificate reloaded when its files change and client
// certificates verified against a CA (mutual TLS).
//
// A slowloris client (headers one byte a second) holds one goroutine and one connection
// slot until the read-header timeout closes it; a client that never reads its response
// holds them until the write timeout does. With the connection cap, both cost at most
// MaxConns goroutines and their socket buffers, whatever the number of clients: the
// connections beyond the cap wait in the kernel's accept queue, and a new one arriving
// while every slot is held closes the keep-alive connection idle the longest (limit.go).
// The bodies of the requests in progress hold at most the in-flight body budget
// (budget.go), and a request smuggling another past a proxy is refused (smuggle.go).
package httpserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluice-broker/sluice/internal/cpubusy"
	"github.com/sluice-broker/sluice/internal/tlsfiles"
)

// Defaults of the server's limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 8192
	// DefaultMaxInflightBodyBytes is the in-flight body budget without
	// WithMaxInflightBodyBytes: the default of sluice serve's --memory-limit.
	DefaultMaxInflightBodyBytes = 64 << 20
)

// h2ReceiveBuffer is the bytes of request bodies one HTTP/2 connection buffers before
// its handlers read them (its flow-control window, and each stream's).
const h2ReceiveBuffer = 256 << 10

// Option configures a Server; see New.
type Option func(*options)

type options struct {
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
	maxHeaderBytes, maxConns                                  int
	maxInflightBody                                           int64
	certFile, keyFile, clientCAFile                           string
	requireClientCert                                         bool
	lean, reuseRequests                                       bool
	errorLog                                                  *log.Logger
	connContext                                               func(context.Context) (context.Context, func())
}

// WithReadHeaderTimeout bounds the TLS handshake and the reading of a request's headers.
// Default DefaultReadHeaderTimeout.
func WithReadHeaderTimeout(d time.Duration) Option {
	return func(o *options) { o.readHeaderTimeout = d }
}

// WithReadTimeout bounds the reading of a whole request, body included. Default
// DefaultReadTimeout.
func WithReadTimeout(d time.Duration) Option { return func(o *options) { o.readTimeout = d } }

// WithWriteTimeout bounds the time from the end of a request's headers to the end of its
// response: a client that does not read its response is cut off after it. Default
// DefaultWriteTimeout.
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// WithIdleTimeout closes a keep-alive connection idle this long. Default
// DefaultIdleTimeout.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithMaxHeaderBytes caps the bytes of a request's headers (431 beyond). Default
// DefaultMaxHeaderBytes.
func WithMaxHeaderBytes(n int) Option { return func(o *options) { o.maxHeaderBytes = n } }

// WithMaxConns caps the connections served at once; more wait to be accepted. Default
// DefaultMaxConns.
func WithMaxConns(n int) Option { return func(o *options) { o.maxConns = n } }

// WithMaxInflightBodyBytes caps the bytes the bodies of the requests in progress may
// hold together (budget.go): a body reserves its bytes before they are read, a request
// that finds no room waits for it up to the read timeout and is then answered 503 with
// Retry-After, and one whose Content-Length exceeds n is answered 413. Default
// DefaultMaxInflightBodyBytes.
func WithMaxInflightBodyBytes(n int64) Option {
	return func(o *options) { o.maxInflightBody = n }
}

// WithTLS serves TLS with the PEM certificate and key in these files, reloaded when they
// change (checked at most once a second, on a handshake).
func WithTLS(certFile, keyFile string) Option {
	return func(o *options) { o.certFile, o.keyFile = certFile, keyFile }
}

// WithClientCA asks clients for a certificate and verifies it against the PEM CA
// certificates of file (mutual TLS). With require, a client without a valid certificate
// fails the handshake; without, a client may send none (and then needs another identity,
// such as a bearer token) but one it sends must verify. Needs WithTLS.
func WithClientCA(file string, require bool) Option {
	return func(o *options) { o.clientCAFile, o.requireClientCert = file, require }
}

// WithLeanHTTP1 turns the lean HTTP/1.1 path on or off (lean.go): on a plain listener,
// plain POSTs are served by a leaner loop than net/http's, to the same handler, and
// everything else by net/http. Without TLS only. Default on.
func WithLeanHTTP1(on bool) Option { return func(o *options) { o.lean = on } }

// WithRequestReuse lets the lean path build requests in *http.Requests, header maps and
// URLs that earlier requests used, pooled (the one last done on the same core, still in
// its cache, rather than one per connection, which with thousands of connections is
// not), instead of allocating new ones: a quarter of the bytes the broker allocated per
// event. A handler served so must not keep the request, its Header or URL (or a slice of
// its Header's values) past its return; the strings in them it may keep. net/http's
// requests are never reused. Default off.
func WithRequestReuse(on bool) Option { return func(o *options) { o.reuseRequests = on } }

// WithConnContext sets f, called once for each connection the lean path serves with the
// server's context: the context f returns is the one that connection's requests carry,
// and the function (if not nil) is called on the connection's goroutine whenever it is
// about to wait for the client's next request with nothing read, and when the lean path
// lets go of it (closed, or handed to net/http). A handler keeps per-connection state
// there (the broker: a turn in its admission queue taken for the next request). Not
// called for connections net/http serves. Default: none.
func WithConnContext(f func(context.Context) (context.Context, func())) Option {
	return func(o *options) { o.connContext = f }
}

// WithErrorLog sets the logger of the server's connection errors (TLS handshake
// failures, timeouts). Default: the log package's standard logger.
func WithErrorLog(l *log.Logger) Option { return func(o *options) { o.errorLog = l } }

func defaults() options {
	return options{
		readHeaderTimeout: DefaultReadHeaderTimeout, readTimeout: DefaultReadTimeout,
		writeTimeout: DefaultWriteTimeout, idleTimeout: DefaultIdleTimeout,
		maxHeaderBytes: DefaultMaxHeaderBytes, maxConns: DefaultMaxConns, lean: true,
		maxInflightBody: DefaultMaxInflightBodyBytes,
	}
}

// validate is the one place options are checked; the error names the option.
func (o *options) validate() error {
	switch {
	case o.readHeaderTimeout <= 0:
		return fmt.Errorf("httpserver: WithReadHeaderTimeout(%v): want > 0", o.readHeaderTimeout)
	case o.readTimeout <= 0:
		return fmt.Errorf("httpserver: WithReadTimeout(%v): want > 0", o.readTimeout)
	case o.writeTimeout <= 0:
		return fmt.Errorf("httpserver: WithWriteTimeout(%v): want > 0", o.writeTimeout)
	case o.idleTimeout <= 0:
		return fmt.Errorf("httpserver: WithIdleTimeout(%v): want > 0", o.idleTimeout)
	case o.maxHeaderBytes < 1024:
		return fmt.Errorf("httpserver: WithMaxHeaderBytes(%d): want at least 1024", o.maxHeaderBytes)
	case o.maxConns < 1:
		return fmt.Errorf("httpserver: WithMaxConns(%d): want at least 1", o.maxConns)
	case o.maxInflightBody < 1:
		return fmt.Errorf("httpserver: WithMaxInflightBodyBytes(%d): want at least 1", o.maxInflightBody)
	case (o.certFile == "") != (o.keyFile == ""):
		return errors.New("httpserver: WithTLS: want both a certificate and a key file")
	case o.clientCAFile != "" && o.certFile == "":
		return errors.New("httpserver: WithClientCA needs WithTLS: client certificates are a part of TLS")
	}
	return nil
}

// Server is one hardened HTTP server on one listener.
type Server struct {
	hs      *http.Server
	handler http.Handler // the handler given to New: the lean path's; net/http's is guard's
	budget  *bodyBudget  // budget.go
	ln      *limitListener
	cert    *tlsfiles.Certificate // nil without TLS
	opts    options

	// The lean path (lean.go), on a plain listener unless WithLeanHTTP1(false).
	lean    bool
	handoff *handoffListener // net/http serves the connections handed to it
	bufs    sync.Pool        // of *[]byte, leanBufSize
	canon   *canonNames
	reqs    sync.Pool // of *leanReq (WithRequestReuse)
	date    dateCache
	// blank is an empty request but for its context (cancelled by Close): each lean
	// request starts as a copy of it, one allocation where WithContext makes two.
	blank    *http.Request
	cancel   context.CancelFunc
	shutting atomic.Bool
	mu       sync.Mutex
	conns    map[*leanConn]struct{} // guarded by mu
	// handshakes are the TLS connections in their handshake (tlsserve.go); guarded by mu.
	handshakes map[net.Conn]struct{}
	acceptor   *acceptor      // accept.go
	reads      *pollReads     // pollread.go
	wg         sync.WaitGroup // one per lean connection, and net/http's Serve
}

// New returns a server of h on ln. It returns an error naming a bad option, or a TLS
// file that does not load.
func New(ln net.Listener, h http.Handler, opts ...Option) (*Server, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Server{ln: newLimitListener(ln, o.maxConns), opts: o, handler: h, budget: newBodyBudget(o.maxInflightBody)}
	s.hs = &http.Server{
		Handler:           s.guard(h),
		ReadHeaderTimeout: o.readHeaderTimeout,
		ReadTimeout:       o.readTimeout,
		WriteTimeout:      o.writeTimeout,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    o.maxHeaderBytes,
		ErrorLog:          o.errorLog,
		ConnContext:       connContext, // smuggle.go
		ConnState:         connState,   // limit.go
	}
	if o.certFile == "" {
		if o.lean {
			s.initLean(ln)
		}
		return s, nil
	}
	cert, err := tlsfiles.LoadCertificate(o.certFile, o.keyFile, tlsfiles.DefaultCheckInterval)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	s.cert = cert
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.GetCertificate}
	if o.clientCAFile != "" {
		pool, err := tlsfiles.LoadCertPool(o.clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
		if o.requireClientCert {
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	tc.NextProtos = []string{"h2", "http/1.1"} // net/http's ServeTLS would add them; serveTLS does not call it
	s.hs.TLSConfig = tc
	s.handoff = newHandoffListener(s.ln.Addr())
	s.handshakes = map[net.Conn]struct{}{}
	// Request bodies an HTTP/2 connection's handlers have not read (a stream waiting for
	// room in the body budget) wait in its flow-control window: at most this per
	// connection, whatever its streams.
	s.hs.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerConnection: h2ReceiveBuffer, MaxReceiveBufferPerStream: h2ReceiveBuffer}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	s.hs.Protocols = &protos
	return s, nil
}

// TLS reports whether the server serves TLS.
func (s *Server) TLS() bool { return s.cert != nil }

// Scheme is "https" with TLS, else "http".
func (s *Server) Scheme() string {
	if s.TLS() {
		return "https"
	}
	return "http"
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown; it returns http.ErrServerClosed then.
func (s *Server) Serve() error {
	if s.cert != nil {
		return s.serveTLS()
	}
	if !s.lean {
		return s.hs.Serve(frameListener{s.ln})
	}
	return s.serveLean()
}

// Shutdown stops accepting connections and waits, until ctx ends, for the requests in
// progress.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.lean && s.cert == nil {
		return s.hs.Shutdown(ctx)
	}
	s.stopAccepting()
	_ = s.ln.Close()
	s.wakeIdle()
	s.closeHandshakes()
	err := s.hs.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// Close closes the listener and every connection at once.
func (s *Server) Close() error {
	if !s.lean && s.cert == nil {
		return s.hs.Close()
	}
	s.stopAccepting()
	err := s.ln.Close()
	if s.cancel != nil {
		s.cancel()
	}
	s.closeHandshakes()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	if cerr := s.hs.Close(); err == nil || errors.Is(err, net.ErrClosed) {
		err = cerr
	}
	return err
}

func (s *Server) initLean(ln net.Listener) {
	s.lean = true
	s.handoff = newHandoffListener(s.ln.Addr())
	s.bufs.New = func() any { b := make([]byte, leanBufSize); return &b }
	s.canon = newCanonNames()
	s.reqs.New = func() any { return &leanReq{hdr: make(http.Header)} }
	var base context.Context
	base, s.cancel = context.WithCancel(context.Background())
	s.blank = (&http.Request{}).WithContext(base)
	s.conns = map[*leanConn]struct{}{}
	s.acceptor = newAcceptor(s.ln, ln, cpubusy.New(acceptCPUEvery))
	s.reads = &pollReads{busy: &s.acceptor.polling, open: s.ln.open}
}

// serveLean accepts connections for the lean path; net/http serves those handed off.
func (s *Server) serveLean() error {
	return s.serveConns(s.acceptor.accept, func(nc net.Conn) { // accept waits for a free slot too (limitListener)
		c, err := s.newLeanConn(nc)
		if err != nil {
			s.logf("http: %v", err)
			_ = nc.Close()
			return
		}
		if !s.track(c) {
			_ = nc.Close()
			return
		}
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	})
}

// serveConns runs net/http on the handoff listener and gives each connection accept
// returns to start, until Shutdown or Close: it returns http.ErrServerClosed then, or
// the listener's error. Timeouts and running out of file descriptors are retried after
// a backoff, as net/http retries them.
func (s *Server) serveConns(accept func() (net.Conn, error), start func(net.Conn)) error {
	s.mu.Lock() // as in track: no Add once Shutdown may be waiting
	if s.shutting.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		_ = s.hs.Serve(s.handoff) // ends with Shutdown or Close
	}()
	var backoff time.Duration
	for {
		nc, err := accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logf("http: Accept error: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			_ = s.Close()
			return err
		}
		backoff = 0
		start(nc)
	}
}

// track adds c to the connections Shutdown and Close reach; false once shutting down.
func (s *Server) track(c *leanConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

// stopAccepting marks the server shutting down; under mu, so that no track adds to wg
// once Shutdown may be waiting on it.
func (s *Server) stopAccepting() {
	s.mu.Lock()
	s.shutting.Store(true)
	s.mu.Unlock()
}

func (s *Server) untrack(c *leanConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// wakeIdle makes every idle lean connection's wait end, so that it closes.
func (s *Server) wakeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.idle.Load() {
			_ = c.nc.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.errorLog != nil {
		s.opts.errorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}
