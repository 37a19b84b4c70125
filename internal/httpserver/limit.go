package httpserver

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// reclaimEvery is how often a connection waiting for a slot looks again for an idle
// connection to close, when it found none.
const reclaimEvery = 50 * time.Millisecond

// limitListener caps the connections served at once (WithMaxConns): a connection frees
// its slot when it is closed. When every slot is held and a connection waits to be
// accepted, the keep-alive connection idle the longest is closed to make room for it
// (reclaim), so that an idle client does not keep a health probe out for the idle
// timeout; with none idle, the new connection waits for a slot, and the ones after it
// in the kernel's accept queue. Unlike golang.org/x/net/netutil.LimitListener, its
// connections keep the socket's CloseWrite (net/http half-closes before closing, so
// that a client still sending reads an error answer such as a 431 instead of a reset)
// and its SyscallConn (the lean path reads and writes the socket directly).
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	once      sync.Once
	mu        sync.Mutex
	conns     map[*slotConn]struct{} // guarded by mu
	reclaimed atomic.Int64           // idle connections closed to make room, ever
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{}), conns: map[*slotConn]struct{}{}}
}

// Accept returns the next connection once it holds a slot. With every slot held, it
// waits for a connection first, then closes idle ones to make room for it.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		return l.track(c), nil
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case l.slots <- struct{}{}:
			return l.track(c), nil
		case <-l.closed:
			_ = c.Close()
			return nil, net.ErrClosed
		case <-t.C:
			l.reclaim()
			t.Reset(reclaimEvery)
		}
	}
}

func (l *limitListener) track(c net.Conn) *slotConn {
	sc := &slotConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[sc] = struct{}{}
	l.mu.Unlock()
	return sc
}

// reclaim closes the connection idle the longest, if any is idle.
func (l *limitListener) reclaim() {
	l.mu.Lock()
	var oldest *slotConn
	var since int64
	for c := range l.conns {
		if t := c.idleSince.Load(); t > 0 && (oldest == nil || t < since) {
			oldest, since = c, t
		}
	}
	l.mu.Unlock()
	if oldest != nil && oldest.idleSince.CompareAndSwap(since, 0) {
		l.reclaimed.Add(1)
		_ = oldest.Close()
	}
}

// open is how many connections hold a slot: accepted and not yet closed.
func (l *limitListener) open() int { return len(l.slots) }

// Close stops Accept, including one waiting for a slot.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// slotConn is a connection holding a slot of its limitListener until closed.
type slotConn struct {
	net.Conn
	l         *limitListener
	once      sync.Once
	idleSince atomic.Int64 // when it began to wait for its next request (Unix ns); 0: not idle
}

// Read reads the socket; a connection net/http serves is busy from the first byte of
// its next request (net/http reports it active only once the whole head is read).
func (c *slotConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.idleSince.Load() != 0 {
		c.idleSince.Store(0)
	}
	return n, err
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

// idle marks the connection as waiting for its next request (or not): reclaim may close
// it.
func (c *slotConn) idle(on bool) {
	if !on {
		c.idleSince.Store(0)
		return
	}
	c.idleSince.Store(max(time.Now().UnixNano(), 1))
}

// CloseWrite half-closes the socket when it can.
func (c *slotConn) CloseWrite() error { return closeWrite(c.Conn) }

// closeWrite half-closes c if it can (a *net.TCPConn, or a wrapper of one that says so);
// net/http looks for CloseWrite on the connections it serves.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SyscallConn is the socket's, for the lean path.
func (c *slotConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.New("httpserver: the connection has no file descriptor")
}

// slotOf is the slotConn inside a connection net/http serves (through a frameConn,
// prefixConn or *tls.Conn); nil if none.
func slotOf(c net.Conn) *slotConn {
	for range 4 {
		switch x := c.(type) {
		case *slotConn:
			return x
		case *tls.Conn:
			c = x.NetConn()
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// connState is net/http's ConnState: a connection waiting for its next request is idle
// (reclaim may close it), one serving a request (or an HTTP/2 stream) is not.
func connState(c net.Conn, st http.ConnState) {
	if sc := slotOf(c); sc != nil {
		switch st {
		case http.StateIdle:
			sc.idle(true)
		case http.StateActive, http.StateNew:
			sc.idle(false)
		}
	}
}
