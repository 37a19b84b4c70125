package kinesis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/sluice-broker/sluice/channel"
)

// putCalls bounds the PutRecords calls of one channel in flight at once.
const putCalls = 4

// publisher batches the entries of concurrent Publish calls into PutRecords calls: while
// putCalls calls are in flight, requests queue, and a sender that comes free takes every
// queued request that fits one call (500 records, 5 MiB). A request that finds a sender
// idle is sent at once: batching adds no wait at low rates. Its senders are owned by the
// channel and stop at Close.
type publisher struct {
	c    *Channel
	wake chan struct{} // one slot per sender: a request was queued
	stop chan struct{} // closed by close
	wg   sync.WaitGroup

	mu     sync.Mutex
	queue  []*putReq
	closed bool
}

// putReq is one call's worth (at most) of one Publish call's entries.
type putReq struct {
	ctx     context.Context
	entries []types.PutRecordsRequestEntry
	size    int
	done    chan error // buffered: the sender never waits for Publish
}

func newPublisher(c *Channel) *publisher {
	p := &publisher{c: c, wake: make(chan struct{}, putCalls), stop: make(chan struct{})}
	for range putCalls {
		p.wg.Go(p.send)
	}
	return p
}

// put queues reqs and waits for each one's outcome.
func (p *publisher) put(reqs []*putReq) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return channel.ErrClosed
	}
	p.queue = append(p.queue, reqs...)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // every sender has a wake-up pending: they will take it
	}
	var first error
	for _, r := range reqs {
		if err := <-r.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// send is one sender: it takes batches until the queue is empty, then waits to be woken.
func (p *publisher) send() {
	for {
		select {
		case <-p.wake:
		case <-p.stop:
			return
		}
		for {
			batch, entries := p.take()
			if len(batch) == 0 {
				break
			}
			ctx, cancel := batchContext(p.c.life, batch)
			err := p.c.put(ctx, entries)
			cancel()
			for _, r := range batch {
				r.done <- err
			}
		}
	}
}

// take removes from the queue the requests that fit one PutRecords call, answering at once
// those whose context has ended.
func (p *publisher) take() (batch []*putReq, entries []types.PutRecordsRequestEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size, n := 0, 0
	for len(p.queue) > 0 {
		r := p.queue[0]
		if err := r.ctx.Err(); err != nil {
			r.done <- channel.Refuse(channel.ErrUnavailable, "the request ended before the events were sent to Kinesis",
				fmt.Errorf("kinesis: %w before the events were sent", err))
		} else {
			if len(batch) > 0 && (n+len(r.entries) > maxBatchRecords || size+r.size > maxBatchBytes) {
				break
			}
			batch = append(batch, r)
			entries = append(entries, r.entries...)
			n += len(r.entries)
			size += r.size
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	return batch, entries
}

// batchContext ends at the earliest deadline of batch's requests, or when parent does.
func batchContext(parent context.Context, batch []*putReq) (context.Context, context.CancelFunc) {
	var dl time.Time
	for _, r := range batch {
		if d, ok := r.ctx.Deadline(); ok && (dl.IsZero() || d.Before(dl)) {
			dl = d
		}
	}
	if dl.IsZero() {
		return context.WithCancel(parent)
	}
	return context.WithDeadline(parent, dl)
}

// close stops the senders once the calls in flight end; queued requests get ErrClosed.
func (p *publisher) close() {
	p.mu.Lock()
	p.closed = true
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, r := range q {
		r.done <- channel.ErrClosed
	}
	close(p.stop)
	p.wg.Wait()
}
