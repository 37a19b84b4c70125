package httpserver

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// limitListener caps the connections served at once (WithMaxConns): Accept waits for a
// free slot, and a connection frees its slot when it is closed. Unlike
// golang.org/x/net/netutil.LimitListener, its connections keep the socket's CloseWrite
// (net/http half-closes before closing, so that a client still sending reads an error
// answer such as a 431 instead of a reset) and its SyscallConn (the lean path reads and
// writes the socket directly).
type limitListener struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
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
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
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
