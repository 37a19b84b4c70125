package rabbitmq

import (
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// returns follows the messages RabbitMQ returns on one publishing channel: Publish sends
// them mandatory, so a message its exchange routes to no queue (a queue deleted since it
// was declared) comes back (basic.return) before its confirm, instead of being dropped.
// Each message carries its Publish call's number and its index as its message-id; the
// listener records the returned ones for the call until it ends.
//
// Ordering: RabbitMQ sends a message's return before its confirm, and the client hands
// them on in that order, so a return reaches rc before the confirm closes the
// DeferredConfirmation. After its confirms a call syncs with the listener (which drains
// rc first): every return of its messages is recorded by then.
type returns struct {
	mu    sync.Mutex
	next  uint64
	calls map[uint64]map[int]bool // open calls: the indices returned

	flush chan chan struct{}
	done  chan struct{} // closed when the listener ends (the publishing channel closed)
}

// maxReturnBuffer is the returns the client may queue for the listener without waiting.
const maxReturnBuffer = 64

// newReturns follows the returns of publishing channel ch until it closes.
func newReturns(ch *amqp.Channel) *returns {
	r := &returns{
		calls: make(map[uint64]map[int]bool),
		flush: make(chan chan struct{}),
		done:  make(chan struct{}),
	}
	go r.listen(ch.NotifyReturn(make(chan amqp.Return, maxReturnBuffer)))
	return r
}

func (r *returns) listen(rc <-chan amqp.Return) {
	defer close(r.done)
	for {
		select {
		case ret, ok := <-rc:
			if !ok {
				return
			}
			r.record(&ret)
		case d := <-r.flush:
			for drained := false; !drained; {
				select {
				case ret, ok := <-rc:
					if !ok {
						close(d)
						return
					}
					r.record(&ret)
				default:
					drained = true
				}
			}
			close(d)
		}
	}
}

// record marks the returned message of an open call; others (a call that gave up, a
// message of another publisher) are ignored.
func (r *returns) record(ret *amqp.Return) {
	var call uint64
	var i int
	if _, err := fmt.Sscanf(ret.MessageId, "sluice.%d.%d", &call, &i); err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got, ok := r.calls[call]; ok {
		got[i] = true
	}
}

// begin opens a call and returns its number; end must follow.
func (r *returns) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	r.calls[r.next] = make(map[int]bool)
	return r.next
}

// end closes call.
func (r *returns) end(call uint64) {
	r.mu.Lock()
	delete(r.calls, call)
	r.mu.Unlock()
}

// messageID is the message-id of message i of call.
func messageID(call uint64, i int) string { return fmt.Sprintf("sluice.%d.%d", call, i) }

// taken returns, once every message of call published so far is confirmed, whether
// message i was returned, clearing the call's record for its next round.
func (r *returns) taken(call uint64) map[int]bool {
	d := make(chan struct{})
	select {
	case r.flush <- d:
		<-d
	case <-r.done:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.calls[call]
	if len(got) > 0 {
		r.calls[call] = make(map[int]bool)
	}
	return got
}
