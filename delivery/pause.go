package delivery

import (
	"context"
	"sync/atomic"
)

// Pausing (docs/pause.md): a paused dispatcher starts no attempt. Its receive loop
// takes no more messages from the consumer, so what is published meanwhile stays
// stored in the channel (on a memory channel within its byte budget; past it ingress
// answers 429 as it does for any full channel). Jobs it held already are parked as
// they come due (a worker that picks one up sets it aside instead of attempting it);
// attempts in progress finish. Resume makes the parked jobs due again, in the order
// they were parked, and the receive loop goes on: on an ordered target each key's
// next job still waits for the previous one to settle, so the order per key is kept.

// pauseState is the dispatcher's pause, guarded by Dispatcher.mu but for on.
type pauseState struct {
	on      atomic.Bool // paused, read without the lock by the workers (park)
	paused  bool
	resumed chan struct{} // closed by Resume; nil while not paused
	parked  []*job        // jobs set aside while paused, in the order they came due

	// The receive loop's context while not paused: Pause ends it, and waits for recvOut,
	// closed once the loop has let go of it (so no message is taken after Pause returns).
	stopRecv context.CancelFunc
	recvOut  chan struct{}
}

// Pause stops the dispatcher's deliveries until Resume: no new attempt starts (attempts
// in progress finish) and, once Pause returns, no more messages are received. It may
// be called before Run, and again while paused (no effect).
func (d *Dispatcher) Pause() {
	d.mu.Lock()
	if !d.pause.paused {
		d.pause.paused = true
		d.pause.on.Store(true)
		d.pause.resumed = make(chan struct{})
		d.log.Info("deliveries paused")
	}
	out := d.pause.recvOut
	if d.pause.stopRecv != nil {
		d.pause.stopRecv()
	}
	d.mu.Unlock()
	if out != nil {
		<-out // Receive returns as soon as its context ends
	}
}

// Resume undoes Pause: the jobs set aside are due again, in the order they were set
// aside, and receiving goes on. No effect when not paused.
func (d *Dispatcher) Resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.pause.paused {
		return
	}
	d.pause.paused = false
	d.pause.on.Store(false)
	close(d.pause.resumed)
	d.pause.resumed = nil
	parked := d.pause.parked
	d.pause.parked = nil
	for _, j := range parked {
		d.pushLocked(j) // never blocks: d.ready holds every message held
	}
	d.log.Info("deliveries resumed", "parked", len(parked))
}

// Paused reports whether the dispatcher is paused.
func (d *Dispatcher) Paused() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pause.paused
}

// park sets j aside if the dispatcher is paused, and reports whether it did. Once the
// dispatcher stops nothing is parked: the workers release what is held. A job taken
// by a worker just as Pause is called may still be attempted, as one in flight is.
func (d *Dispatcher) park(j *job) bool {
	if !d.pause.on.Load() { // the common case costs no lock
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.pause.paused || d.stopping {
		return false
	}
	d.pause.parked = append(d.pause.parked, j)
	return true
}

// unparkLocked makes every parked job due, for the workers to release on a hard stop.
// Called with d.mu held and d.stopping set.
func (d *Dispatcher) unparkLocked() {
	for _, j := range d.pause.parked {
		d.pushLocked(j)
	}
	d.pause.parked = nil
}

// receiveContext returns the context the receive loop receives with: a child of ctx
// that Pause ends. While paused it returns nil and the channel Resume closes.
func (d *Dispatcher) receiveContext(ctx context.Context) (context.Context, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leaveReceiveLocked()
	if d.pause.paused {
		return nil, d.pause.resumed
	}
	rctx, cancel := context.WithCancel(ctx)
	d.pause.stopRecv, d.pause.recvOut = cancel, make(chan struct{})
	return rctx, nil
}

// leaveReceive tells a Pause waiting for the receive loop that it has let go of its
// context.
func (d *Dispatcher) leaveReceive() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leaveReceiveLocked()
}

func (d *Dispatcher) leaveReceiveLocked() {
	if d.pause.recvOut != nil {
		d.pause.stopRecv()
		close(d.pause.recvOut)
		d.pause.stopRecv, d.pause.recvOut = nil, nil
	}
}
