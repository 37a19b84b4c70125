package jetstream

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// message is one stored event delivered to one subscription. Ack and Release are safe
// to call concurrently; only the first settles.
type message struct {
	c       *Consumer
	jm      jetstream.Msg
	ev      *event.Event
	touched time.Time // last keep-alive; guarded by c.heldMu
	settled atomic.Bool
}

var _ channel.Message = (*message)(nil)

// errSettled is returned by Ack on a message already acknowledged or released.
var errSettled = errors.New("jetstream: message already settled")

func (m *message) Event() *event.Event { return m.ev }

// Ack tells the server the subscription is done with the message; it is then deleted
// from the stream. The acknowledgement is not confirmed: if it is lost (a crash right
// after), the message is delivered again, as at-least-once allows.
func (m *message) Ack() error {
	if !m.settled.CompareAndSwap(false, true) {
		return errSettled
	}
	m.c.unhold(m)
	m.c.sub.acked.Add(1)
	if err := m.jm.Ack(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		return fmt.Errorf("jetstream: ack: %w", unavailable(err))
	}
	return nil
}

// Release hands the message back unsettled: the server delivers it again at once to
// whichever consumer of the subscription fetches next, or after AckWait if the
// connection is gone. It always reports true: the event stays stored.
func (m *message) Release() bool {
	if !m.settled.CompareAndSwap(false, true) {
		return true
	}
	m.c.unhold(m)
	if err := m.jm.Nak(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		m.c.log.Debug("jetstream nak failed; redelivery after ack wait", "err", err)
	}
	return true
}
