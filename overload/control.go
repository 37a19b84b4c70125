package overload

import (
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

// holdScale is the number of held connections per unit of RejectHold: with more held,
// each is held longer (at most 2×, so that the next request on a held connection is
// still answered well within a second).
const holdScale = 512

// Control is the overload control of one server: its options, and what all its
// brokers share (the connections held after a 429). Each broker has a Gate of it. Safe
// for concurrent use.
type Control struct {
	opts     Options
	held     atomic.Int64 // connections held after a 429 (Hold)
	draining atomic.Bool  // Drain was called
	done     <-chan struct{}
}

// New returns the control of one server with opts, or Validate's error. Holds and waits
// for a connection's turn end early once done is closed (the server has stopped).
func New(opts Options, done <-chan struct{}) (*Control, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Control{opts: opts, done: done}, nil
}

// Options returns the options c runs with.
func (c *Control) Options() Options { return c.opts }

// Drain tells c that the server is shutting down: from now on no connection is held
// after a 429, and none waits for room for its next request.
func (c *Control) Drain() { c.draining.Store(true) }

// Hold is the second rule of docs/decisions/0005-reject-hold.md: called after a 429
// was written to w, it flushes the answer and waits RejectHold less waited (what the
// request already waited for room), jittered between ½ and 1×, before returning, so
// that the connection's next request is not read meanwhile: it waits in the socket,
// and a client that keeps sending is pushed back through TCP at no CPU cost. With many
// connections held at once (more than 2 × holdScale) each is held twice as long. Only
// HTTP/1.x connections are held (an HTTP/2 stream holds nothing but itself); the wait
// ends early if the client goes away or the server stops.
func (c *Control) Hold(w http.ResponseWriter, r *http.Request, waited time.Duration) {
	d := c.opts.RejectHold - waited
	if d <= 0 || r.ProtoMajor != 1 || c.draining.Load() {
		return
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	// Many connections held at once mean many clients refused: hold each longer, so
	// refusals cost no more CPU with 2,048 connections than with a few hundred.
	n := c.held.Add(1)
	defer c.held.Add(-1)
	d = d * time.Duration(min(max(n/holdScale, 1), 2))
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	case <-c.done:
	}
}
