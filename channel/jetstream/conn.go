package jetstream

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// connWatch follows a NATS connection's status so that Publish stops waiting for
// acknowledgements the moment the connection is lost (the client fails pending
// acknowledgements on reconnect, but not when the connection closes). It is safe for
// concurrent use.
type connWatch struct {
	nc     *nats.Conn
	events chan nats.Status
	done   chan struct{} // closed when the status goroutine has returned

	mu   sync.Mutex
	lost chan struct{} // closed while the connection is not connected
}

func watchConn(nc *nats.Conn) *connWatch {
	w := &connWatch{nc: nc, events: nc.StatusChanged(), done: make(chan struct{}), lost: make(chan struct{})}
	w.update()
	go func() {
		defer close(w.done)
		for range w.events { // closed by stop
			w.update()
		}
	}()
	return w
}

// update re-reads the status: events may be dropped when the listener is slow.
func (w *connWatch) update() {
	connected := w.nc.Status() == nats.CONNECTED
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.lost:
		if connected {
			w.lost = make(chan struct{})
		}
	default:
		if !connected {
			close(w.lost)
		}
	}
}

// Lost returns a channel closed when the connection is lost; take a new one after it
// comes back.
func (w *connWatch) Lost() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

func (w *connWatch) stop() {
	w.nc.RemoveStatusListener(w.events)
	<-w.done
}
