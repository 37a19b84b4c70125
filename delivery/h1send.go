package delivery

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// Sending a request and waiting for its answer without a read that finds nothing.
//
// A delivery writes its request, then reads the answer. On loopback the subscriber has
// not answered yet when the read comes: the read finds nothing (EAGAIN), the goroutine
// parks, the network poller wakes it, and a second read takes the answer. Half of the
// reads of the delivery side were these empty ones, one system call per event.
//
// Go's poller forgets a socket's readiness before every read (it cannot know whether
// bytes already waiting were taken), so a goroutine cannot just wait for the answer
// after writing: an answer that arrived in between would not wake it. It can inside a
// raw read, though: syscall.RawConn.Read forgets the readiness first, then calls its
// function, which may return false to wait for the socket to become readable. Writing
// the request there, the answer can only arrive after the readiness was forgotten, so
// its arrival wakes the wait, and the read that follows finds it. The wait is bounded
// by the connection's read deadline, as any read.
//
// The raw write is the whole request in one system call, as before. When the socket
// takes only part of it (or none, or the call is interrupted), the rest is written the
// usual way, with the write deadline, and the answer is read the usual way too. Bytes
// already buffered from the socket (a subscriber that sent more than one answer) also
// take the usual way: they are read first. A readiness that is not the answer's (a late
// wake-up meant for an earlier read) only costs the empty read this saves.

// rawConnOf returns c's raw connection, or nil if it has none (then send writes the
// usual way).
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// send writes buf, a whole request, on pc and returns once the answer's first bytes
// can be read without waiting (mostly; see above) or the request could not be sent.
// An error after the request was written is the wait's: the read deadline passed or
// the connection's context ended.
func (pc *h1Conn) send(buf []byte) error {
	if pc.rc == nil || pc.br.Buffered() > 0 {
		_, err := pc.c.Write(buf)
		return err
	}
	pc.out, pc.sent, pc.werr, pc.waited = buf, 0, nil, false
	rerr := pc.rc.Read(pc.wtw)
	out, sent, werr := pc.out, pc.sent, pc.werr
	pc.out = nil
	switch {
	case werr != nil:
		return werr
	case sent < len(out):
		_, err := pc.c.Write(out[sent:])
		return err
	}
	return rerr
}

// writeThenWait is send's raw read function, bound once per connection as pc.wtw (a
// method value made per call would allocate): first it writes pc.out and, when all of it went, asks
// to wait for the socket to become readable; called again once it has, it is done.
func (pc *h1Conn) writeThenWait(fd uintptr) bool {
	if pc.waited {
		return true
	}
	n, err := syscall.Write(int(fd), pc.out)
	if n > 0 {
		pc.sent = n
	}
	switch {
	case err == nil && pc.sent == len(pc.out):
		pc.waited = true
		return false // wait for the answer
	case err == nil, errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		return true // the rest the usual way
	}
	pc.werr = &net.OpError{Op: "write", Net: "tcp", Source: pc.c.LocalAddr(), Addr: pc.c.RemoteAddr(), Err: os.NewSyscallError("write", err)}
	return true
}
