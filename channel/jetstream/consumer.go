package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// How long one pull request waits for messages, and how long the fetch loop backs off
// after an error (doubling up to the maximum).
const (
	fetchWait       = 5 * time.Second
	minFetchBackoff = 100 * time.Millisecond
	maxFetchBackoff = 2 * time.Second
	lagCacheTTL     = 100 * time.Millisecond
	lagTimeout      = 2 * time.Second
)

// Consumer is one subscription's stream of messages, pulled in batches from its durable
// JetStream consumer. Receive hands messages out in stream order; it is safe to call
// from several goroutines, each message going to one of them. Len and Close are safe
// for concurrent use.
//
// A message is kept alive on the server (AckWait reset) from the moment it is fetched
// until it is settled, so in normal operation the server never redelivers it: retries
// are the dispatcher's. At most 2×FetchBatch messages are buffered locally.
type Consumer struct {
	ch   *Channel
	name string
	log  *slog.Logger

	msgs  chan *message // fetched, not yet received
	space chan struct{} // signalled when Receive frees room in msgs

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	heldMu sync.Mutex
	held   map[*message]struct{} // fetched and not settled, kept alive

	sub *subscription // this process's publish and ack counts, for Len

	lagMu    sync.Mutex
	jc       jetstream.Consumer // replaced by recreate
	lagAt    time.Time          // when the server last answered or failed to
	lag      int
	answered bool // the server has answered once: later asks run in the background
	asking   bool // a background ask is in flight
	// sub's counts just before lag was asked for: Len moves lag by what this process
	// published and acknowledged since.
	lagPublished, lagAcked int64
}

var _ channel.Consumer = (*Consumer)(nil)

func newConsumer(ch *Channel, name string, jc jetstream.Consumer) *Consumer {
	ctx, cancel := context.WithCancel(context.Background())
	return &Consumer{
		ch:     ch,
		name:   name,
		sub:    ch.sub(name),
		jc:     jc,
		log:    ch.log.With("subscription", name),
		msgs:   make(chan *message, 2*ch.cfg.fetchBatch),
		space:  make(chan struct{}, 1),
		ctx:    ctx,
		cancel: cancel,
		held:   make(map[*message]struct{}),
	}
}

func (c *Consumer) start() {
	c.wg.Add(2)
	go c.fetchLoop()
	go c.keepAliveLoop()
}

// Receive returns the next message, blocking until one is available, ctx ends
// (ctx.Err()) or the consumer or its channel is closed (channel.ErrClosed).
func (c *Consumer) Receive(ctx context.Context) (channel.Message, error) {
	if c.ctx.Err() != nil {
		return nil, channel.ErrClosed
	}
	select {
	case m := <-c.msgs:
		c.signalSpace()
		return m, nil
	default:
	}
	select {
	case m := <-c.msgs:
		c.signalSpace()
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, channel.ErrClosed
	}
}

func (c *Consumer) signalSpace() {
	select {
	case c.space <- struct{}{}:
	default:
	}
}

// Len reports the subscription's lag: messages stored for it and not yet delivered, plus
// messages delivered and not yet settled (across all replicas sharing it). The server is
// asked at most every 100ms; in between the answer is moved by what this process has
// published to the subscription and acknowledged of it since, so that ingress's backlog
// bound (which reads Len every millisecond) follows the backlog event by event instead
// of in 100 ms steps. Other replicas' publishes and acknowledgements show at the next
// ask; so do a publish this process sent that the server did not store and an
// acknowledgement that did not reach it (both are counted when sent), and a publish or
// acknowledgement that crosses an ask, which may be counted twice (in the server's
// answer and in the move).
//
// Only the first answer is waited for (until then there is nothing to move, and the
// drain at shutdown must not take an unknown backlog for none). Later asks run in the
// background, one at a time, and Len answers at once from the last answer moved as
// above: ingress's backlog verdict calls Len on the request path, once per trigger, and
// a server that answers slowly must not hold that request. On error the last answer (or,
// before the first, none) is kept and the server is asked again 100 ms later.
func (c *Consumer) Len() int {
	c.lagMu.Lock()
	stale := time.Since(c.lagAt) >= lagCacheTTL
	if !c.answered && stale {
		c.lagMu.Unlock()
		c.askLag()
		c.lagMu.Lock()
	} else if c.answered && stale && !c.asking && c.ctx.Err() == nil {
		c.asking = true
		c.wg.Go(func() { // started under lagMu before Close's cancel, so before its Wait
			c.askLag()
			c.lagMu.Lock()
			c.asking = false
			c.lagMu.Unlock()
		})
	}
	n := int64(c.lag) + c.sub.published.Load() - c.lagPublished - (c.sub.acked.Load() - c.lagAcked)
	c.lagMu.Unlock()
	return int(max(n, 0))
}

// askLag asks the server for the subscription's lag, without holding lagMu while it
// waits. It gives up when the consumer closes or after lagTimeout.
func (c *Consumer) askLag() {
	c.lagMu.Lock()
	jc := c.jc
	c.lagMu.Unlock()
	published, acked := c.sub.published.Load(), c.sub.acked.Load()
	ctx, cancel := context.WithTimeout(c.ctx, lagTimeout)
	defer cancel()
	info, err := jc.Info(ctx)
	c.lagMu.Lock()
	defer c.lagMu.Unlock()
	c.lagAt = time.Now()
	if err != nil {
		c.log.Debug("jetstream consumer info failed", "err", err)
		return
	}
	c.lag = int(info.NumPending) + info.NumAckPending
	c.lagPublished, c.lagAcked = published, acked
	c.answered = true
}

// Close stops fetching. Messages fetched but not yet received are handed back to the
// server for prompt redelivery (to another replica, or after a restart); messages
// received and not settled stay stored and are redelivered after AckWait unless settled
// first. Close waits for the fetch loop and a lag request in flight (Len) to stop.
func (c *Consumer) Close() error {
	c.once.Do(func() {
		c.lagMu.Lock()
		c.cancel() // under lagMu: Len starts no background ask once it sees c.ctx ended
		c.lagMu.Unlock()
		c.wg.Wait()
	drain:
		for {
			select {
			case m := <-c.msgs:
				m.Release()
			default:
				break drain
			}
		}
		c.ch.forget(c)
	})
	return nil
}

// fetchLoop pulls batches into msgs, never more than msgs has room for, so that every
// fetched message is registered for keep-alive at once and sending never blocks.
func (c *Consumer) fetchLoop() {
	defer c.wg.Done()
	batch := c.ch.cfg.fetchBatch
	minFetch := max(1, batch/2)
	backoff := minFetchBackoff
	failing := false
	for c.ctx.Err() == nil {
		room := cap(c.msgs) - len(c.msgs)
		if room < minFetch {
			select {
			case <-c.space:
			case <-c.ctx.Done():
			}
			continue
		}
		err := c.fetch(min(room, batch))
		if err == nil {
			if failing {
				c.log.Info("jetstream consumer resumed")
				failing = false
			}
			backoff = minFetchBackoff
			continue
		}
		if c.ctx.Err() != nil {
			return
		}
		if !failing {
			c.log.Warn("jetstream fetch failed, retrying", "err", err)
			failing = true
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			c.recreate()
		}
		select {
		case <-time.After(backoff):
		case <-c.ctx.Done():
		}
		backoff = min(2*backoff, maxFetchBackoff)
	}
}

// fetch runs one pull request for up to n messages.
func (c *Consumer) fetch(n int) error {
	c.lagMu.Lock()
	jc := c.jc
	c.lagMu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, fetchWait)
	defer cancel()
	b, err := jc.Fetch(n, jetstream.FetchContext(ctx))
	if err != nil {
		return err
	}
	for jm := range b.Messages() {
		e, err := event.DecodeBinary(jm.Data())
		if err != nil {
			// Redelivering a message that cannot be decoded would loop forever.
			md, _ := jm.Metadata()
			c.log.Error("jetstream message cannot be decoded, terminating it", "metadata", md, "err", err)
			_ = jm.TermWithReason("sluice: corrupt event")
			continue
		}
		m := &message{c: c, jm: jm, ev: e}
		c.hold(m)
		c.msgs <- m
	}
	err = b.Error()
	if err != nil && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		err = nil
	}
	return err
}

// recreate creates the subscription's consumer again after it vanished from the server
// (its data was lost, or another replica removed it).
func (c *Consumer) recreate() {
	ctx, cancel := context.WithTimeout(c.ctx, lagTimeout)
	defer cancel()
	jc, err := c.ch.js.CreateOrUpdateConsumer(ctx, c.ch.stream, c.ch.consumerConfig(c.name))
	if err != nil {
		c.log.Warn("jetstream consumer re-creation failed", "err", err)
		return
	}
	c.lagMu.Lock()
	c.jc = jc
	c.lagMu.Unlock()
	c.log.Warn("jetstream consumer was missing and has been re-created")
}

func (c *Consumer) hold(m *message) {
	c.heldMu.Lock()
	m.touched = time.Now()
	c.held[m] = struct{}{}
	c.heldMu.Unlock()
}

func (c *Consumer) unhold(m *message) {
	c.heldMu.Lock()
	delete(c.held, m)
	c.heldMu.Unlock()
}

// keepAliveLoop tells the server every AckWait/3 that held messages are in progress, so
// it redelivers only after a crash, never while the dispatcher is retrying.
func (c *Consumer) keepAliveLoop() {
	defer c.wg.Done()
	period := c.ch.cfg.ackWait / 3
	t := time.NewTicker(period)
	defer t.Stop()
	var due []*message
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-t.C:
			due = due[:0]
			c.heldMu.Lock()
			for m := range c.held {
				if now.Sub(m.touched) >= period {
					m.touched = now
					due = append(due, m)
				}
			}
			c.heldMu.Unlock()
			for _, m := range due {
				if err := m.jm.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
					c.log.Debug("jetstream keep-alive failed", "err", err)
				}
			}
			clear(due)
		}
	}
}
