package httpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The lean HTTP/1.1 path (docs/overload.md, "The lean ingress path"). On a plain
// listener, each connection is served by a loop that reads with a pooled buffer, which
// it holds only while the connection has unprocessed bytes: an idle keep-alive
// connection costs its goroutine and socket, not two 4 KiB buffers as with net/http, so
// the bytes a request touches stay in cache however many connections are open. A
// request the lean parser takes (a plain POST with a Content-Length whose head and body
// fit the buffer: leanrequest.go, and whose body finds room in the server's budget:
// budget.go) is served there, to the same http.Handler; at the first one it does not
// take, the connection — the bytes read so far included — is handed to
// net/http for the rest of its life, so every other request, error and limit is
// net/http's. Deadlines are set only when a read or write must wait, not per request.

// leanBufSize is the size of the pooled read buffers: a request's head must fit in one
// for the lean path to serve it. A request whose body does not fit too, up to
// leanMaxRequest bytes in all, gets a buffer of its size for itself. Small, because a
// request waiting for room (the broker's admission queue) holds its buffer: 2,048
// waiting hold 8 MiB.
const (
	leanBufSize    = 4 << 10
	leanMaxRequest = 64 << 10
)

// leanConn is one connection on the lean path.
type leanConn struct {
	srv    *Server
	nc     net.Conn
	slot   *slotConn // nc's slot, marked idle while the connection waits for a request; nil: none
	rc     syscall.RawConn
	remote string

	buf      *[]byte // pooled; nil while no bytes are held
	n        int     // bytes held in buf
	head     leanHead
	headLen  int   // > 0: the head of the request in buf is parsed and lean
	reserved int64 // the bytes its body holds in the server's budget (budget.go)
	reqStart time.Time
	rdl      time.Time // the read deadline set; zero: none
	rdlIdle  bool      // rdl is an idle deadline

	w       leanResponse
	body    leanBody
	scratch []byte
	idle    atomic.Bool // waiting for a request with no bytes held (wakeIdle)

	blank  *http.Request // the server's, or one carrying WithConnContext's context
	onIdle func()        // WithConnContext's; nil without

	// The raw read's and write's callbacks, bound once, and what they share with read and
	// write: a closure over their locals would escape to the heap, five objects per call.
	readFn, writeFn func(fd uintptr) bool
	rd              rawRead
	wr              rawWrite
}

// rawRead is the state of one read: its result and how its callback ended.
type rawRead struct {
	m            int
	err          error
	called, stop bool
}

// rawWrite is the state of one write: the bytes left, its error, and whether it set a
// deadline.
type rawWrite struct {
	p   []byte
	err error
	set bool
}

// leanBody is a request's body: the bytes in the connection's buffer.
type leanBody struct{ bytes.Reader }

func (*leanBody) Close() error { return nil }

func (s *Server) newLeanConn(nc net.Conn) (*leanConn, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("httpserver: %T has no file descriptor", nc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &leanConn{srv: s, nc: nc, rc: rc, remote: nc.RemoteAddr().String(), blank: s.blank}
	c.slot, _ = nc.(*slotConn)
	if f := s.opts.connContext; f != nil {
		var ctx context.Context
		ctx, c.onIdle = f(s.blank.Context())
		c.blank = s.blank.WithContext(ctx)
	}
	c.w.header = make(http.Header)
	c.readFn, c.writeFn = c.readRaw, c.writeRaw
	return c, nil
}

// serve serves the connection until it closes or is handed to net/http.
func (c *leanConn) serve() {
	for {
		for c.n > 0 {
			total, lean, complete := c.next()
			if !lean {
				c.handoff()
				return
			}
			if !complete {
				break
			}
			if !c.serveOne(total) {
				c.close()
				return
			}
		}
		if !c.read() {
			c.close()
			return
		}
	}
}

// next looks at the bytes held: the length of the first request, whether the lean path
// takes it, and whether all of it is held.
func (c *leanConn) next() (total int, lean, complete bool) {
	b := (*c.buf)[:c.n]
	if c.headLen == 0 {
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i < 0 {
			return 0, c.n < min(c.srv.opts.maxHeaderBytes, leanBufSize) && !bareLF(b), false
		}
		if !parseLeanHead(b[:i+4], &c.head) || int64(i+4)+c.head.contentLen > leanMaxRequest {
			return 0, false, false
		}
		// The body's bytes are reserved before a buffer is made for them; without room,
		// net/http's handler (guard) waits for it or refuses.
		if n := c.head.contentLen; n > 0 {
			if !c.srv.budget.tryReserve(n) {
				return 0, false, false
			}
			c.reserved = n
		}
		c.headLen = i + 4
	}
	total = c.headLen + int(c.head.contentLen)
	if total > cap(b) {
		nb := make([]byte, total)
		copy(nb, b)
		c.release()
		c.buf = &nb
	}
	return total, true, c.n >= total
}

// bareLF reports whether b holds a LF without a CR before it: a head only net/http
// parses (it may end with a bare blank line the lean path would not see).
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// serveOne serves the request of total bytes at the start of the buffer; false: close
// the connection.
func (c *leanConn) serveOne(total int) bool {
	b := *c.buf
	head := b[:c.headLen]
	var into *leanReq // WithRequestReuse: the one the last request done on this core used
	if c.srv.opts.reuseRequests {
		into = c.srv.reqs.Get().(*leanReq)
	}
	r := c.head.request(into, c.blank, head, string(head), c.srv.canon)
	r.RemoteAddr = c.remote
	c.body.Reset(b[c.headLen:total])
	r.Body = &c.body
	c.w.reset(c)
	ok := c.handle(r)
	c.releaseBody()
	if into != nil {
		c.srv.reqs.Put(into)
	}
	if !ok {
		return false
	}
	err := c.w.finish()
	c.body.Reset(nil)
	c.headLen, c.reqStart = 0, time.Time{}
	c.n = copy(b, b[total:c.n])
	if c.n == 0 {
		c.release()
	}
	if cap(c.scratch) > leanBufSize || cap(c.w.out) > leanBufSize {
		c.scratch, c.w.out = nil, nil
	}
	return err == nil && !c.w.close && !c.srv.shutting.Load()
}

// handle runs the handler; like net/http, it recovers a panic, logs it (unless it is
// http.ErrAbortHandler) and closes the connection.
func (c *leanConn) handle(r *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.srv.logf("http: panic serving %v: %v\n%s", c.remote, p, debug.Stack())
			}
			ok = false
		}
	}()
	c.srv.handler.ServeHTTP(&c.w, r)
	return true
}

// read waits for and reads more bytes of the connection into its buffer, taking one
// from the pool only once bytes are there. False: the connection is over (closed by the
// client, timed out, failed, or the server is shutting down while it was idle).
func (c *leanConn) read() bool {
	for retried := false; ; retried = true {
		c.rd = rawRead{}
		err := c.rc.Read(c.readFn)
		rd := &c.rd
		switch {
		case rd.stop:
			return false
		case err != nil && !rd.called && !retried && errors.Is(err, os.ErrDeadlineExceeded):
			// A deadline set for an earlier wait has passed; this read has not waited yet.
			if c.srv.shutting.Load() && c.n == 0 {
				return false
			}
			c.setReadDeadline()
			continue
		case err != nil || rd.err != nil || rd.m <= 0:
			return false
		}
		c.n += rd.m
		return true
	}
}

// readRaw is read's callback: it reads what the socket has, or reports that the read
// must wait (false) after preparing the wait.
func (c *leanConn) readRaw(fd uintptr) bool {
	rd := &c.rd
	rd.called = true
	if c.buf == nil {
		c.buf = c.srv.bufs.Get().(*[]byte)
	}
	for {
		rd.m, rd.err = syscall.Read(int(fd), (*c.buf)[c.n:])
		if rd.err != syscall.EINTR {
			break
		}
	}
	if rd.err != syscall.EAGAIN {
		if c.idle.Load() {
			c.idle.Store(false)
			if c.slot != nil {
				c.slot.idle(false)
			}
		}
		return true
	}
	rd.err = nil
	if c.n > 0 {
		c.setReadDeadline()
		return false
	}
	// Idle: no buffer held, and Shutdown may wake the wait (wakeIdle). The flag goes up
	// and the deadline is set before shutting is read, so either this sees shutting or
	// wakeIdle's deadline comes after this one.
	c.release()
	c.idled()
	c.idle.Store(true)
	if c.slot != nil {
		c.slot.idle(true) // reclaim may close it (limit.go)
	}
	c.setReadDeadline()
	if c.srv.shutting.Load() {
		rd.stop = true
		return true
	}
	return false
}

// setReadDeadline sets the deadline of the wait ahead: the idle timeout between
// requests (moved only when less than 7/8 of it is left, not at every request), the
// header or read timeout from the start of a request.
func (c *leanConn) setReadDeadline() {
	now := time.Now()
	o := &c.srv.opts
	if c.n == 0 {
		if c.rdlIdle && c.rdl.Sub(now) > o.idleTimeout*7/8 {
			return
		}
		c.rdl, c.rdlIdle = now.Add(o.idleTimeout), true
	} else {
		if c.reqStart.IsZero() {
			c.reqStart = now
		}
		d := o.readTimeout
		if c.headLen == 0 {
			d = min(d, o.readHeaderTimeout)
		}
		want := c.reqStart.Add(d)
		if !c.rdlIdle && c.rdl.Equal(want) {
			return
		}
		c.rdl, c.rdlIdle = want, false
	}
	_ = c.nc.SetReadDeadline(c.rdl)
}

// write writes p whole; a write that must wait has the write timeout to finish.
func (c *leanConn) write(p []byte) error {
	c.wr = rawWrite{p: p}
	err := c.rc.Write(c.writeFn)
	wr := &c.wr
	if wr.set {
		_ = c.nc.SetWriteDeadline(time.Time{}) // an expired deadline would fail the next write
	}
	werr := wr.err
	c.wr = rawWrite{} // keep no reference to p
	if err != nil {
		return err
	}
	return werr
}

// writeRaw is write's callback: it writes what the socket takes, or reports that the
// write must wait (false) after setting its deadline.
func (c *leanConn) writeRaw(fd uintptr) bool {
	wr := &c.wr
	for len(wr.p) > 0 {
		m, e := syscall.Write(int(fd), wr.p)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			if !wr.set {
				_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.writeTimeout))
				wr.set = true
			}
			return false
		case e != nil:
			wr.err = e
			return true
		}
		wr.p = wr.p[m:]
	}
	return true
}

// release returns the buffer to the pool (one of a large request's own to the
// collector) once no bytes are held in it.
func (c *leanConn) release() {
	putBuf(&c.srv.bufs, c.buf)
	c.buf = nil
}

func putBuf(pool *sync.Pool, b *[]byte) {
	if b != nil && cap(*b) == leanBufSize {
		pool.Put(b)
	}
}

// releaseBody gives back the bytes the request's body holds in the budget.
func (c *leanConn) releaseBody() {
	c.srv.budget.release(c.reserved)
	c.reserved = 0
}

func (c *leanConn) close() {
	c.releaseBody()
	c.srv.untrack(c)
	c.idled()
	c.release()
	_ = c.nc.Close() // frees its slot (limitListener)
}

// idled calls WithConnContext's function, if any.
func (c *leanConn) idled() {
	if c.onIdle != nil {
		c.onIdle()
	}
}

// handoff gives the connection, with the bytes read and not served, to net/http.
func (c *leanConn) handoff() {
	c.releaseBody()
	c.srv.untrack(c)
	c.idled()
	_ = c.nc.SetDeadline(time.Time{})
	pc := &prefixConn{Conn: c.nc, buf: c.buf, data: (*c.buf)[:c.n], pool: &c.srv.bufs,
		poller: newFDPoller(c.nc), reads: c.srv.reads}
	c.buf, c.n = nil, 0
	if !c.srv.handoff.give(&frameConn{Conn: pc}) { // smuggle.go
		_ = pc.Close()
	}
}

// prefixConn is a connection handed to net/http: reads return the bytes the lean path
// read first, then the socket's, waited for on a timer while the CPU is saturated
// (pollread.go).
type prefixConn struct {
	net.Conn
	mu     sync.Mutex
	buf    *[]byte
	data   []byte
	pool   *sync.Pool
	poller fdPoller
	reads  *pollReads
	dmu    sync.Mutex   // orders the socket's read deadline: net/http's and a look's
	rdl    atomic.Int64 // net/http's read deadline, Unix ns (0: none); written under dmu
}

func (p *prefixConn) Read(b []byte) (int, error) {
	p.mu.Lock()
	if len(p.data) > 0 {
		n := copy(b, p.data)
		p.data = p.data[n:]
		if len(p.data) == 0 {
			p.releaseLocked()
		}
		p.mu.Unlock()
		return n, nil
	}
	p.mu.Unlock()
	for {
		p.reads.wait(p.poller, &p.rdl)
		if !p.looks() || !take(&p.reads.looking) {
			return p.Conn.Read(b)
		}
		n, err := p.readLook(b)
		p.reads.looking.Add(-1)
		if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if d := p.rdl.Load(); d != 0 && time.Now().UnixNano() >= d {
			return n, err // net/http's deadline
		}
	}
}

// looks reports whether a read should wait on the poller for acceptBusyLook at a time
// (pollread.go): the CPU is not saturated, and other connections are open.
func (p *prefixConn) looks() bool {
	r := p.reads
	return r != nil && p.poller.rc != nil && !r.busy.Load() && r.open() > 1
}

// readLook reads with the socket's deadline at acceptBusyLook from now, or net/http's
// if that is sooner, and then puts net/http's back.
func (p *prefixConn) readLook(b []byte) (int, error) {
	p.dmu.Lock()
	look := time.Now().Add(acceptBusyLook)
	if d := p.rdl.Load(); d != 0 && d <= look.UnixNano() {
		p.dmu.Unlock()
		return p.Conn.Read(b) // net/http's deadline comes first, and is set
	}
	err := p.Conn.SetReadDeadline(look)
	p.dmu.Unlock()
	if err != nil {
		return p.Conn.Read(b) // closed: Read says so
	}
	n, err := p.Conn.Read(b)
	p.dmu.Lock()
	_ = p.Conn.SetReadDeadline(fromUnixNano(p.rdl.Load()))
	p.dmu.Unlock()
	return n, err
}

// SetReadDeadline sets the socket's and keeps it for a read waiting on a timer.
func (p *prefixConn) SetReadDeadline(t time.Time) error {
	p.dmu.Lock()
	defer p.dmu.Unlock()
	p.rdl.Store(unixNano(t))
	return p.Conn.SetReadDeadline(t)
}

// SetDeadline sets the socket's and keeps the read deadline as SetReadDeadline does.
func (p *prefixConn) SetDeadline(t time.Time) error {
	p.dmu.Lock()
	defer p.dmu.Unlock()
	p.rdl.Store(unixNano(t))
	return p.Conn.SetDeadline(t)
}

// fromUnixNano is unixNano's inverse: the zero time for 0.
func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// unixNano is t in Unix ns, 0 for the zero time (no deadline); a time at or before the
// epoch (net/http's "a long time ago") is 1, a deadline long past.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// NetConn is the connection inside (slotOf).
func (p *prefixConn) NetConn() net.Conn { return p.Conn }

func (p *prefixConn) Close() error {
	p.mu.Lock()
	p.data = nil
	p.releaseLocked()
	p.mu.Unlock()
	return p.Conn.Close()
}

// CloseWrite lets net/http half-close before closing, as it does a *net.TCPConn, so
// that a client still sending reads the answer rather than a reset.
func (p *prefixConn) CloseWrite() error { return closeWrite(p.Conn) }

func (p *prefixConn) releaseLocked() {
	putBuf(p.pool, p.buf)
	p.buf = nil
}

// handoffListener is the listener net/http serves: it accepts the connections the lean
// path hands over.
type handoffListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to net/http; false once the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
}
