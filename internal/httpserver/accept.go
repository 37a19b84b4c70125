package httpserver

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The lean path's accept loop on a busy scheduler.
//
// On one P (GOMAXPROCS=1, as for a broker pinned to one core), a goroutine that the
// network poller wakes while the P is busy joins the global run queue: sysmon's poll and
// the poll at the end of each GC pause have no P to queue it on. The scheduler takes one
// goroutine from that queue every 61 schedules while its own queue has work, and under
// overload goroutines that wake each other (handlers and a channel's publisher, through
// mutexes and channels) keep its own queue from running dry. At the start of a
// JetStream overload a health probe's new connection waited long for the accept loop
// (docs/decisions/0011-accept-loop-polls-while-saturated.md). A goroutine a timer wakes
// runs next instead.
//
// So while the process's CPU is saturated the accept loop does not wait on the poller:
// it asks the kernel whether a connection is waiting (poll(2), zero timeout), accepts it
// if so, and otherwise sleeps acceptPoll; a new connection then waits about acceptPoll
// at most, however busy the scheduler. Saturated is internal/cpubusy's: more than 75%
// of GOMAXPROCS CPUs, read at most every acceptCPUEvery, and looked at once per
// acceptWindow while polling. Otherwise the loop waits on the poller, which wakes it at
// once on an idle scheduler, with a deadline to look again: acceptBusyLook while any
// connection is open, so that an overload on connections already open (the usual start
// of one: a client's pool opens, then sends) is noticed within about that; acceptIdleLook
// while none is, where there is nothing to saturate the CPU with and each look wakes an
// idle process for nothing. It also looks after each connection it accepts. Polling at
// a low rate or idle would cost more than it could save: it would wake an idle broker
// every acceptPoll for nothing.
const (
	acceptPoll      = 5 * time.Millisecond
	acceptWindow    = 100 * time.Millisecond
	acceptBusyLook  = 50 * time.Millisecond
	acceptIdleLook  = 500 * time.Millisecond
	acceptCPUEvery  = 20 * time.Millisecond
	acceptWindowLen = int(acceptWindow / acceptPoll) // looks per window, polling
)

// acceptor accepts a listener's connections for the lean path (see above). Its accept
// is called from one goroutine.
type acceptor struct {
	ln       *limitListener
	deadline interface{ SetDeadline(time.Time) error }
	poller   fdPoller
	cpu      interface{ Busy(time.Time) bool } // a *cpubusy.Meter
	polling  atomic.Bool                       // the mode; atomic for tests
	polls    int                               // looks since the window began (polling)
}

// newAcceptor accepts from ln, the limitListener over inner, polling while cpu says
// busy; with an inner listener that has no file descriptor or deadline, it always waits
// on the poller.
func newAcceptor(ln *limitListener, inner net.Listener, cpu interface{ Busy(time.Time) bool }) *acceptor {
	a := &acceptor{ln: ln, cpu: cpu, poller: newFDPoller(inner)}
	if d, ok := inner.(interface{ SetDeadline(time.Time) error }); ok && a.poller.rc != nil {
		a.deadline = d
	}
	return a
}

// accept returns the next connection, or the listener's error.
func (a *acceptor) accept() (net.Conn, error) {
	if a.deadline == nil {
		return a.ln.Accept()
	}
	for {
		wait := a.look()
		if a.polling.Load() {
			if !a.poller.readable() {
				time.Sleep(acceptPoll)
				if a.polls++; a.polls >= acceptWindowLen {
					a.polls = 0
					a.polling.Store(a.cpu.Busy(time.Now()))
				}
				continue
			}
			// A connection waits; the deadline only bounds the rare case where it is
			// gone by the time Accept asks (reset by its client).
			wait = acceptPoll
		}
		if err := a.deadline.SetDeadline(time.Now().Add(wait)); err != nil {
			return a.ln.Accept() // closed: Accept says so
		}
		nc, err := a.ln.Accept()
		if a.polls = 0; !a.polling.Load() || err == nil {
			a.polling.Store(a.cpu.Busy(time.Now()))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		return nc, err
	}
}

// look is how long the loop waits on the poller before it looks at the CPU again.
func (a *acceptor) look() time.Duration {
	if a.ln.open() > 0 {
		return acceptBusyLook
	}
	return acceptIdleLook
}

// fdPoller tells whether a socket has something to read: a listener a connection
// waiting in its accept queue, a connection bytes (or its end).
type fdPoller struct {
	rc syscall.RawConn // nil: no file descriptor
}

func newFDPoller(c any) fdPoller {
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return fdPoller{rc: rc}
		}
	}
	return fdPoller{}
}

// readable reports whether a read (or Accept) would return at once: there is something
// to read, or the socket failed or is closed (and the read returns the error).
func (p fdPoller) readable() bool {
	ready := true
	// A listener's RawConn has Control only (Read is EINVAL); the poll does not wait.
	err := p.rc.Control(func(fd uintptr) {
		fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], 0)
		// EINTR (a signal, such as the runtime's preemption): nothing seen; look again
		// after the next sleep.
		ready = err != nil && !errors.Is(err, unix.EINTR) || n > 0
	})
	return ready || err != nil
}
