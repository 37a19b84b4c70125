package rabbitmq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// consumer is one subscription's consumer: one goroutine subscribes to its queue on an
// AMQP channel of its own (again after each lost connection) and queues the deliveries
// on ready; another measures the queue's depth for Len when asked. It is safe for
// concurrent use.
type consumer struct {
	ch    *Channel
	name  string
	queue string

	ready  chan *message // cap prefetch: RabbitMQ hands out no more unacknowledged
	closed chan struct{} // closed by Close
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	// For Len: messages this process published to the queue (and released back into
	// it), messages received from it, and received and not settled.
	published atomic.Int64
	delivered atomic.Int64
	unacked   atomic.Int64

	poke chan struct{} // asks the measuring goroutine for a depth

	mu       sync.Mutex
	depth    int64     // ready messages, as RabbitMQ last said
	pubAt    int64     // published when depth was asked
	delAt    int64     // delivered when depth was asked
	measured time.Time // when depth was last asked (zero: never)
}

var _ channel.Consumer = (*consumer)(nil)

func newConsumer(c *Channel, name string) *consumer {
	k := &consumer{
		ch:     c,
		name:   name,
		queue:  c.queue(name),
		ready:  make(chan *message, c.cfg.prefetch),
		closed: make(chan struct{}),
		poke:   make(chan struct{}, 1),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	return k
}

// start declares the queue now if connected (so that Len starts from its depth), then
// starts the goroutines.
func (k *consumer) start() {
	if s := k.ch.current(); s != nil {
		n, err := k.ch.declareQueue(s.conn, k.name)
		if err == nil {
			k.mu.Lock()
			k.depth, k.measured = int64(n), time.Now()
			k.mu.Unlock()
		}
	}
	k.wg.Add(2)
	go k.run()
	go k.measure()
}

// run subscribes to the queue and queues its deliveries, again after each lost channel.
func (k *consumer) run() {
	defer k.wg.Done()
	backoff := 100 * time.Millisecond
	for k.ctx.Err() == nil {
		s, err := k.ch.waitSession(k.ctx)
		if err != nil {
			return
		}
		if err := k.subscribe(s); err != nil {
			k.ch.log.Warn("consume", "rabbitmq: cannot consume; retrying", "queue", k.queue, "err", err)
			if !k.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// subscribe consumes the queue on a new AMQP channel of s until that channel closes or
// the consumer does.
func (k *consumer) subscribe(s *session) error {
	if _, err := k.ch.declareQueue(s.conn, k.name); err != nil {
		return err
	}
	ach, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	defer func() { _ = ach.Close() }() // RabbitMQ requeues what it holds unacknowledged
	if err := ach.Qos(k.ch.cfg.prefetch, 0, false); err != nil {
		return fmt.Errorf("prefetch: %w", err)
	}
	tag := fmt.Sprintf("sluice-%p", k)
	deliveries, err := ach.Consume(k.queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consuming %s: %w", k.queue, err)
	}
	k.ask()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				if k.ctx.Err() == nil {
					k.ch.log.Warn("cancel", "rabbitmq: consumer channel closed; subscribing again", "queue", k.queue)
				}
				return nil
			}
			k.delivered.Add(1)
			k.unacked.Add(1)
			m := &message{k: k, ev: decode(&d), tag: d.DeliveryTag, ach: ach}
			select {
			case k.ready <- m:
			case <-k.ctx.Done():
				return nil
			}
		case <-k.ctx.Done():
			_ = ach.Cancel(tag, false) // waits for RabbitMQ to drop the consumer
			return nil
		}
	}
}

func (k *consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-k.ctx.Done():
		return false
	}
}

// Receive returns the next message, blocking until one is delivered, ctx ends or the
// consumer is closed (channel.ErrClosed). Messages received on an AMQP channel since
// lost are skipped: RabbitMQ delivers them again.
func (k *consumer) Receive(ctx context.Context) (channel.Message, error) {
	for {
		m, err := channel.Receive(ctx, k.ready, k.closed)
		if err != nil {
			return nil, err
		}
		if mm := m.(*message); mm.ach.IsClosed() {
			mm.forget()
			continue
		}
		return m, nil
	}
}

// Len is the queue's ready messages as last measured, moved by what was published to it
// and received from it since, plus the messages received and not settled. It asks for a
// new measure, in the background, when the last one is older than lenEvery.
func (k *consumer) Len() int {
	k.mu.Lock()
	n := k.depth + (k.published.Load() - k.pubAt) - (k.delivered.Load() - k.delAt)
	old := stale(k.measured)
	k.mu.Unlock()
	if old {
		k.ask()
	}
	return int(max(0, n) + k.unacked.Load())
}

// ask pokes the measuring goroutine without waiting.
func (k *consumer) ask() {
	select {
	case k.poke <- struct{}{}:
	default:
	}
}

// measure asks RabbitMQ for the queue's depth each time it is poked, at most every
// lenEvery.
func (k *consumer) measure() {
	defer k.wg.Done()
	for {
		select {
		case <-k.poke:
		case <-k.ctx.Done():
			return
		}
		pub, del := k.published.Load(), k.delivered.Load()
		ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
		n, err := k.ch.depth(ctx, k.name)
		cancel()
		k.mu.Lock()
		if err == nil {
			k.depth, k.pubAt, k.delAt = int64(n), pub, del
		}
		k.measured = time.Now()
		k.mu.Unlock()
		if !k.sleep(lenEvery) {
			return
		}
	}
}

// Close stops consuming. RabbitMQ delivers the messages not acknowledged again, to the
// next consumer of the queue.
func (k *consumer) Close() error {
	k.once.Do(func() {
		close(k.closed)
		k.cancel()
		k.wg.Wait()
		k.ch.forget(k)
	})
	return nil
}

// message is one delivery of the subscription's queue.
type message struct {
	k    *consumer
	ev   *event.Event
	tag  uint64
	ach  *amqp.Channel
	done atomic.Bool
}

var _ channel.Message = (*message)(nil)

func (m *message) Event() *event.Event { return m.ev }

// forget settles m locally only: its channel is gone and RabbitMQ delivers it again.
func (m *message) forget() bool {
	if !m.done.CompareAndSwap(false, true) {
		return false
	}
	m.k.unacked.Add(-1)
	return true
}

// Ack acknowledges the message: RabbitMQ deletes it from the queue. After the consumer
// closed, or once its AMQP channel is lost, it fails and RabbitMQ delivers the event
// again.
func (m *message) Ack() error {
	if !m.forget() {
		return nil
	}
	select {
	case <-m.k.closed:
		return fmt.Errorf("%w: rabbitmq: ack after the consumer closed; the event will be delivered again", channel.ErrClosed)
	default:
	}
	if err := m.ach.Ack(m.tag, false); err != nil {
		return fmt.Errorf("%w: rabbitmq: ack of a message of %s: %w; the event will be delivered again", channel.ErrUnavailable, m.k.queue, err)
	}
	return nil
}

// Release returns the message to its queue unsettled (a nack with requeue); RabbitMQ
// delivers it again. It reports true.
func (m *message) Release() bool {
	if !m.forget() {
		return true
	}
	m.k.published.Add(1) // ready in the queue again
	_ = m.ach.Nack(m.tag, false, true)
	return true
}
