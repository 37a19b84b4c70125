package delivery

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
)

// DLQStorer keeps an event whose delivery failed for good when the target has no
// dead-letter sink (package dlq): the dispatcher settles the message only once it
// returns nil. An error is retried with the target's policy; once the attempts are
// exhausted the event is logged and counted as undeliverable, as without a store.
type DLQStorer func(ctx context.Context, e dlq.Entry) error

// WithDLQ keeps the events that fail for good and have no dead-letter sink in s instead
// of logging and dropping them. Default: none.
func WithDLQ(s DLQStorer) Option { return func(d *Dispatcher) { d.dlq = s } }

// toStore moves j, whose dead-letter event is dl, to the store phase.
func (d *Dispatcher) toStore(ctx context.Context, t *resolved, j *job) {
	j.phase, j.tries, j.attempt = phaseStore, j.attempt, 0
	d.storeDead(ctx, t, j)
}

// storeDead makes one attempt to keep j in the dead-letter store. A redriven dead
// letter withdrawn (purged) meanwhile is settled instead of stored anew.
func (d *Dispatcher) storeDead(ctx context.Context, t *resolved, j *job) {
	if d.withdrawn(ctx, j) {
		return
	}
	err := d.dlq(ctx, entryOf(j))
	if ctx.Err() != nil {
		d.release(j)
		return
	}
	j.attempt++
	if err == nil {
		d.noteDeadLetter(t.Name, j.dls, "stored")
		d.log.Debug("event kept in the dead-letter store", "id", j.ev.ID)
		d.settle(j)
		return
	}
	o := outcome{err: err, errData: []byte(err.Error())}
	d.failed(ctx, t, j, &o, nil, j.dls)
}

// entryOf is the dead-letter store's entry of j: its event as received, and the
// attempts, status, destination and reason of its failure (from j.dls).
func entryOf(j *job) dlq.Entry {
	e := dlq.Entry{Event: j.ev, Attempts: j.tries}
	e.Dest, _ = j.dls.Get(ExtErrorDest)
	code, _ := j.dls.Get(ExtErrorCode)
	e.Code, _ = strconv.Atoi(code)
	if data, ok := j.dls.Get(ExtErrorData); ok {
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			b = []byte(data)
		}
		e.Reason = dlq.TrimReason(strings.TrimSpace(string(b)))
	}
	return e
}

// Withdrawable is a message handed over by Redeliver that may be withdrawn before
// the dispatcher is done with it (a redriven dead letter purged from its store). Before
// each attempt to the subscriber, and before a failure is stored anew, the dispatcher
// asks Withdrawn: true settles the message (Ack) with no attempt and nothing stored. An
// error counts as not withdrawn: the event is delivered rather than lost.
type Withdrawable interface {
	Withdrawn(ctx context.Context) (bool, error)
}

// withdrawn settles j and reports true if it was redriven and its message has been
// withdrawn since.
func (d *Dispatcher) withdrawn(ctx context.Context, j *job) bool {
	w, ok := j.msg.(Withdrawable)
	if !j.redriven || !ok {
		return false
	}
	gone, err := w.Withdrawn(ctx)
	if err != nil {
		d.log.Warn("cannot tell whether a redriven dead letter was purged; delivering it", "id", j.ev.ID, "err", err)
		return false
	}
	if !gone {
		return false
	}
	d.log.Debug("redriven dead letter purged before its attempt; settled without it", "id", j.ev.ID)
	d.settle(j)
	return true
}

// injection is a message handed to the receive loop by Redeliver.
type injection struct {
	m    channel.Message
	done chan error // buffered: nil once taken, channel.ErrClosed if never
}

// Redeliver hands m to the dispatcher as if its consumer had returned it: it is
// delivered with the target's policy, within the in-flight and rate caps, not while
// paused, and settled (Ack) or released like any message. It returns once the receive
// loop has taken m, with ctx's error if ctx ends first, or channel.ErrClosed if the
// dispatcher stops receiving (not running, draining, stopped): then m was not taken.
// Messages handed over wait in turn before the consumer's next message.
func (d *Dispatcher) Redeliver(ctx context.Context, m channel.Message) error {
	in := &injection{m: m, done: make(chan error, 1)}
	d.mu.Lock()
	if !d.running || d.injClosed {
		d.mu.Unlock()
		return channel.ErrClosed
	}
	d.inj = append(d.inj, in)
	d.injN.Store(int32(len(d.inj)))
	if d.pause.stopRecv != nil { // wake the receive loop: it takes injections first
		d.pause.stopRecv()
	}
	d.mu.Unlock()
	select {
	case err := <-in.done:
		return err
	case <-ctx.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.inj {
		if x == in {
			d.inj = append(d.inj[:i], d.inj[i+1:]...)
			d.injN.Store(int32(len(d.inj)))
			return ctx.Err()
		}
	}
	return <-in.done // taken meanwhile
}

// takeInjected returns the oldest message handed over by Redeliver, or nil.
func (d *Dispatcher) takeInjected() channel.Message {
	if d.injN.Load() == 0 { // the common case costs no lock
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.inj) == 0 {
		return nil
	}
	in := d.inj[0]
	d.inj[0] = nil
	d.inj = d.inj[1:]
	d.injN.Store(int32(len(d.inj)))
	in.done <- nil
	return in.m
}

// closeInjections refuses what Redeliver handed over and not taken, and what it will.
func (d *Dispatcher) closeInjections() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.injClosed = true
	for _, in := range d.inj {
		in.done <- channel.ErrClosed
	}
	d.inj = nil
	d.injN.Store(0)
}
