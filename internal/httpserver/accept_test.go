package httpserver

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

func TestFDPollerListener(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, ln net.Listener)
		want  bool
	}{
		{"nothing waits", func(*testing.T, net.Listener) {}, false},
		{"a connection waits", func(t *testing.T, ln net.Listener) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}, true},
		{"closed (Accept returns the error)", func(_ *testing.T, ln net.Listener) { ln.Close() }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			p := newFDPoller(ln)
			if p.rc == nil {
				t.Fatal("a TCP listener has a file descriptor")
			}
			tt.setup(t, ln)
			// The kernel queues a dialled connection by the time Dial returns on loopback.
			if got := p.readable(); got != tt.want {
				t.Errorf("readable() = %v, want %v", got, tt.want)
			}
		})
	}
}

// acceptLoop runs a.accept until it fails, handing each connection to conns; the
// returned channel gets its error.
func acceptLoop(a *acceptor, conns chan<- net.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			c, err := a.accept()
			if err != nil {
				done <- err
				return
			}
			conns <- c
		}
	}()
	return done
}

// limited listens on a free loopback port: the inner listener and the limitListener
// over it, closed when the test ends.
func limited(t *testing.T) (net.Listener, *limitListener) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 16)
	t.Cleanup(func() { ln.Close() })
	return inner, ln
}

// closeEnds closes ln and checks that the accept loop whose error done gets ends with
// net.ErrClosed.
func closeEnds(t *testing.T, ln net.Listener, done <-chan error, what string) {
	t.Helper()
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: accept after Close: %v, want net.ErrClosed", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: accept did not return after the listener closed", what)
	}
}

// fakeCPU is a cpubusy.Meter whose answer the test sets.
type fakeCPU struct{ busy atomic.Bool }

func (f *fakeCPU) Busy(time.Time) bool { return f.busy.Load() }

// TestAcceptorModes walks the acceptor through its modes: waiting on the poller while
// the CPU is not saturated, polling while it is, and back; connections are accepted in
// either mode, and closing the listener ends it in either.
func TestAcceptorModes(t *testing.T) {
	inner, ln := limited(t)
	cpu := &fakeCPU{}
	a := newAcceptor(ln, inner, cpu)
	if a.deadline == nil {
		t.Fatal("a TCP listener takes deadlines: the acceptor must not always wait")
	}
	conns := make(chan net.Conn, 4)
	done := acceptLoop(a, conns)
	dial := func(mode string) {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		select {
		case s := <-conns:
			s.Close()
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: a connection was not accepted in 5 s", mode)
		}
	}
	polling := func() bool { return a.polling.Load() }
	waiting := func() bool { return !a.polling.Load() }

	dial("waiting on the poller")
	if polling() {
		t.Error("polling after a connection, with the CPU idle")
	}
	cpu.busy.Store(true) // no new connection: the deadline wakes the acceptor to look
	sluicetest.Eventually(t, 5*time.Second, "polling once the CPU is saturated", polling)
	dial("polling")
	time.Sleep(3 * acceptWindow)
	if !polling() {
		t.Error("stopped polling while the CPU stayed saturated")
	}
	cpu.busy.Store(false)
	sluicetest.Eventually(t, 5*time.Second, "waiting on the poller once the CPU is not saturated", waiting)
	dial("waiting on the poller again")
	closeEnds(t, ln, done, "waiting on the poller")
}

// TestAcceptorClosedWhilePolling: closing the listener ends a polling acceptor too.
func TestAcceptorClosedWhilePolling(t *testing.T) {
	inner, ln := limited(t)
	cpu := &fakeCPU{}
	cpu.busy.Store(true)
	a := newAcceptor(ln, inner, cpu)
	a.polling.Store(true)
	done := acceptLoop(a, make(chan net.Conn))
	time.Sleep(2 * acceptPoll)
	closeEnds(t, ln, done, "polling")
}

// TestAcceptorLook: waiting on the poller, the acceptor looks at the CPU again soon while
// a connection is open (an overload starts on open connections) and seldom while none is.
func TestAcceptorLook(t *testing.T) {
	inner, ln := limited(t)
	a := newAcceptor(ln, inner, &fakeCPU{})
	if got := a.look(); got != acceptIdleLook {
		t.Errorf("no connection open: look %v, want %v", got, acceptIdleLook)
	}
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := a.accept()
	if err != nil {
		t.Fatal(err)
	}
	if got := a.look(); got != acceptBusyLook {
		t.Errorf("a connection open: look %v, want %v", got, acceptBusyLook)
	}
	s.Close()
	if got := a.look(); got != acceptIdleLook {
		t.Errorf("the connection closed: look %v, want %v", got, acceptIdleLook)
	}
}
