// Package rabbitmq is the durable channel for users who run RabbitMQ (Knative's
// RabbitMQBroker class). Each broker has a direct exchange; each subscription (trigger)
// a queue of its own bound to it by the subscription's name.
//
// # Layout
//
// The exchange is "<prefix>.<namespace>.<name>" and a subscription's queue
// "<exchange>/<subscription>" (durable, a quorum queue unless WithQueueType says
// classic), bound with the subscription's name as its routing key. Publish sends one
// persistent message per event and subscription ingress routed it to, the subscription's
// name as its routing key, so RabbitMQ stores a copy in each of their queues and nothing
// in the others'. Messages are
// CloudEvents in binary mode as Knative's RabbitMQ broker writes them: "ce-<name>"
// headers, datacontenttype as the content-type property, data as the body.
//
// Two stream queues per broker keep what its replicas share besides events: StateQueue
// its triggers' API pauses (Channel.StateStore) and DLQQueue its dead-letter store
// (Channel.DLQStore). Streams need RabbitMQ 3.9 or later.
//
// # Guarantees
//
// Publish returns nil only once RabbitMQ confirmed every message (publisher confirms):
// a quorum queue confirms once a majority of its replicas wrote it. A nack (a queue at
// its WithMaxQueueBytes bound) fails with channel.ErrFull; a connection that is down,
// blocked by a memory or disk alarm, or lost before the confirms, and a context that
// ends first, fail with channel.ErrUnavailable. Messages of a failed call may be stored
// in some queues: they are delivered like any other (at-least-once). Publish declares a
// subscription's queue before its first message to it (again after each new connection),
// so that no event is routed to a queue that does not exist yet. Messages are published
// mandatory: one whose queue was deleted since (another replica's Remove, an operator)
// comes back from RabbitMQ instead of being dropped, and Publish declares the queue again
// and sends it again, up to maxRounds times in all before failing with
// channel.ErrUnavailable naming the queue.
//
// Each consumer takes its queue with a prefetch of WithPrefetch messages (default 1,024)
// and acknowledges each message when it is settled. Release returns a message to its
// queue (a nack with requeue): RabbitMQ delivers it again, to this consumer or another.
// A consumer that dies (a crash, a lost connection) leaves its unacknowledged messages to
// RabbitMQ, which delivers them again at once. Several replicas consuming one queue
// share its messages; one replica alone receives each queue's messages in publish
// order (redeliveries aside).
//
// Consumer.Len is the queue's ready messages as RabbitMQ last reported them (asked in
// the background at most every 100 ms, never while Len waits), moved by what this process
// published to the queue and received from it since, plus the messages this consumer
// holds unsettled.
//
// The connection is kept open: when it is lost the channel reconnects with backoff (up
// to 2 s apart), Publish fails at once with channel.ErrUnavailable meanwhile, and the
// consumers subscribe again.
package rabbitmq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

// Channel is a RabbitMQ channel: one exchange, one queue per subscription. It is safe for
// concurrent use.
type Channel struct {
	cfg       config
	brokerKey string
	exchange  string
	log       *ratelog.Logger

	sessMu  sync.Mutex
	sess    *session      // nil while disconnected
	changed chan struct{} // closed when sess changes

	inspMu   sync.Mutex
	inspConn *amqp.Connection // the connection insp belongs to
	insp     *amqp.Channel    // for queue depths

	mu        sync.Mutex
	consumers map[string]*consumer
	declared  map[string]bool          // queues declared (they outlive connections)
	removing  map[string]chan struct{} // Remove under way: closed when it ends
	closed    bool

	life context.Context // ends at Close
	end  context.CancelFunc
	wg   sync.WaitGroup
}

var (
	_ channel.Channel = (*Channel)(nil)
	_ channel.Durable = (*Channel)(nil)
	_ channel.Checker = (*Channel)(nil)
)

// Durable reports true: what the channel stored survives the process (channel.Durable).
func (c *Channel) Durable() bool { return true }

// New returns the channel of the broker called brokerKey ("namespace/name"). It connects
// and declares the exchange once before it returns; when RabbitMQ cannot be reached it
// logs why and keeps trying in the background, so a broker can start before RabbitMQ.
func New(_ context.Context, brokerKey string, opts ...Option) (*Channel, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("rabbitmq channel: %w", err)
	}
	if _, err := amqp.ParseURI(cfg.url); err != nil {
		return nil, fmt.Errorf("rabbitmq channel: WithURL: %w", err)
	}
	c := &Channel{
		cfg:       cfg,
		brokerKey: brokerKey,
		exchange:  ExchangeName(cfg.prefix, brokerKey),
		log:       ratelog.New(cfg.logger),
		changed:   make(chan struct{}),
		consumers: make(map[string]*consumer),
		declared:  make(map[string]bool),
		removing:  make(map[string]chan struct{}),
	}
	c.life, c.end = context.WithCancel(context.Background())
	s, err := c.dial()
	if err != nil {
		c.log.Warn("connect", "rabbitmq: cannot connect yet; retrying in the background", "exchange", c.exchange, "err", err)
	}
	c.wg.Add(1)
	go c.maintain(s)
	if s != nil {
		_, _ = c.waitSession(c.life) // maintain sets it at once
	}
	return c, nil
}

// ExchangeName is the exchange of the broker called brokerKey:
// "<prefix>.<namespace>.<name>", shortened with a hash past RabbitMQ's 255 bytes.
func ExchangeName(prefix, brokerKey string) string {
	return fit(prefix + "." + strings.ReplaceAll(brokerKey, "/", "."))
}

// QueueName is the queue of subscription sub on the exchange called exchange:
// "<exchange>/<sub>", shortened with a hash past RabbitMQ's 255 bytes.
func QueueName(exchange, sub string) string { return fit(exchange + "/" + sub) }

// fit shortens a name over RabbitMQ's 255-byte limit to its first 222 bytes, '~' and 32
// hex digits of its SHA-256, so that two long names stay apart.
func fit(name string) string {
	if len(name) <= 255 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:222] + "~" + hex.EncodeToString(sum[:16])
}

// Exchange is the channel's exchange.
func (c *Channel) Exchange() string { return c.exchange }

func (c *Channel) queue(sub string) string { return QueueName(c.exchange, sub) }

// queueArgs are the arguments of the queues this package declares.
func (c *Channel) queueArgs() amqp.Table {
	args := amqp.Table{amqp.QueueTypeArg: c.cfg.queueType}
	if c.cfg.maxQueueBytes > 0 {
		args[amqp.QueueMaxLenBytesArg] = c.cfg.maxQueueBytes
		args[amqp.QueueOverflowArg] = amqp.QueueOverflowRejectPublish
	}
	return args
}

// declareQueue declares subscription sub's queue and binds it, on channels of its own
// (an error closes an AMQP channel). A queue that exists with other arguments is used as
// it is. It returns the queue's ready messages.
func (c *Channel) declareQueue(conn *amqp.Connection, sub string) (int, error) {
	name := c.queue(sub)
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclare(name, true, false, false, false, c.queueArgs())
	if amqpCode(err) == amqp.PreconditionFailed {
		c.log.Warn("args", "rabbitmq: the queue exists with other arguments (type, length limit); using it as it is",
			"queue", name, "err", err)
		if ch, err = conn.Channel(); err != nil {
			return 0, fmt.Errorf("opening a channel: %w", err)
		}
		defer func() { _ = ch.Close() }()
		q, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	if err != nil {
		return 0, fmt.Errorf("declaring queue %s: %w", name, err)
	}
	if err := ch.QueueBind(name, sub, c.exchange, false, nil); err != nil {
		return 0, fmt.Errorf("binding queue %s to %s: %w", name, c.exchange, err)
	}
	c.mu.Lock()
	c.declared[sub] = true
	c.mu.Unlock()
	return q.Messages, nil
}

// amqpCode is the AMQP reply code of err, or 0.
func amqpCode(err error) int {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// ensureQueues declares the queues of subs not declared yet.
func (c *Channel) ensureQueues(s *session, subs map[string]bool) error {
	c.mu.Lock()
	var todo []string
	for sub := range subs {
		if !c.declared[sub] {
			todo = append(todo, sub)
		}
	}
	c.mu.Unlock()
	for _, sub := range todo {
		if _, err := c.declareQueue(s.conn, sub); err != nil {
			return err
		}
	}
	return nil
}

// Publish sends one message per envelope and subscription it was routed to and returns
// once RabbitMQ confirmed all of them. See the package doc for its errors.
func (c *Channel) Publish(ctx context.Context, envs []channel.Envelope) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return channel.ErrClosed
	}
	type out struct {
		pub amqp.Publishing
		key string // the subscription
	}
	msgs := make([]out, 0, len(envs))
	subs := map[string]bool{}
	for i := range envs {
		env := &envs[i]
		if len(env.Subscriptions) == 0 {
			continue
		}
		pub, size, err := encode(env.Event)
		if err != nil {
			return err
		}
		if size > c.cfg.maxMessageBytes {
			return channel.Refuse(channel.ErrTooLarge,
				fmt.Sprintf("event %s is %d bytes as a RabbitMQ message, over the channel's %d-byte limit", env.Event.ID, size, c.cfg.maxMessageBytes), nil)
		}
		for _, s := range env.Subscriptions {
			subs[s] = true
			msgs = append(msgs, out{pub, s}) // MessageId differs, Headers and Body are shared
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	s := c.current()
	if s == nil {
		return channel.Refuse(channel.ErrUnavailable, "RabbitMQ is unreachable", nil)
	}
	if blocked, _ := s.isBlocked(); blocked {
		return channel.Refuse(channel.ErrUnavailable, "RabbitMQ blocks publishing (a memory or disk alarm)", nil)
	}
	if err := c.ensureQueues(s, subs); err != nil {
		c.log.Warn("declare", "rabbitmq: cannot declare a queue", "exchange", c.exchange, "err", err)
		return channel.Refuse(channel.ErrUnavailable, "RabbitMQ refused the channel's queues", err)
	}
	call := s.rets.begin()
	defer s.rets.end(call)
	todo := make([]int, len(msgs))
	for i := range msgs {
		todo[i] = i
		msgs[i].pub.MessageId = messageID(call, i)
	}
	for round := 1; ; round++ {
		if err := c.send(ctx, s, todo, func(i int) (string, amqp.Publishing) { return msgs[i].key, msgs[i].pub }); err != nil {
			return err
		}
		returned := s.rets.taken(call)
		if len(returned) == 0 {
			break
		}
		// RabbitMQ routed these to no queue: their queues were deleted since this
		// process declared them (another replica removed the trigger, an operator).
		// Declare them again and send these messages again.
		todo = todo[:0]
		missing := map[string]bool{}
		for i := range msgs {
			if returned[i] {
				todo = append(todo, i)
				missing[msgs[i].key] = true
			}
		}
		var names []string
		c.mu.Lock()
		for sub := range missing {
			delete(c.declared, sub)
			names = append(names, c.queue(sub))
		}
		c.mu.Unlock()
		slices.Sort(names)
		c.log.Warn("returned", "rabbitmq: RabbitMQ had no queue for messages; declaring the queues again",
			"exchange", c.exchange, "queues", names, "round", round)
		if round == maxRounds {
			return channel.Refuse(channel.ErrUnavailable,
				fmt.Sprintf("RabbitMQ has no queue for the events (%s) after declaring it again", strings.Join(names, ", ")),
				fmt.Errorf("rabbitmq: %d messages to %s returned unroutable", len(todo), c.exchange))
		}
		if err := c.ensureQueues(s, missing); err != nil {
			c.log.Warn("declare", "rabbitmq: cannot declare a queue", "exchange", c.exchange, "err", err)
			return channel.Refuse(channel.ErrUnavailable, "RabbitMQ refused the channel's queues", err)
		}
	}
	c.counted(envs)
	return nil
}

// maxRounds bounds the rounds of one Publish: a message RabbitMQ returns (its queue was
// deleted) is sent again once its queues are declared again.
const maxRounds = 3

// send publishes the messages of indices todo on s, mandatory, and waits for RabbitMQ's
// confirms. See the package doc for its errors.
func (c *Channel) send(ctx context.Context, s *session, todo []int, msg func(int) (string, amqp.Publishing)) error {
	blocked, blockedC := s.isBlocked()
	if blocked {
		return channel.Refuse(channel.ErrUnavailable, "RabbitMQ blocks publishing (a memory or disk alarm)", nil)
	}
	dcs := make([]*amqp.DeferredConfirmation, len(todo))
	for j, i := range todo {
		key, pub := msg(i)
		dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, c.exchange, key, true, false, pub)
		if err != nil {
			c.log.Warn("publish", "rabbitmq: publish failed", "exchange", c.exchange, "err", err)
			return channel.Refuse(channel.ErrUnavailable, "the events could not be sent to RabbitMQ", fmt.Errorf("rabbitmq publish to %s: %w", c.exchange, err))
		}
		dcs[j] = dc
	}
	nacked := 0
	for _, dc := range dcs {
		select {
		case <-dc.Done():
			if !dc.Acked() {
				if s.pub.IsClosed() {
					return channel.Refuse(channel.ErrUnavailable, "the connection to RabbitMQ was lost before it confirmed the events",
						fmt.Errorf("rabbitmq: publishing channel of %s closed", c.exchange))
				}
				nacked++
			}
		case <-ctx.Done():
			return channel.Refuse(channel.ErrUnavailable, "RabbitMQ did not confirm the events in time", ctx.Err())
		case <-blockedC:
			return channel.Refuse(channel.ErrUnavailable, "RabbitMQ blocks publishing (a memory or disk alarm)", nil)
		}
	}
	if nacked > 0 {
		cause := fmt.Errorf("rabbitmq: %d of %d messages to %s nacked", nacked, len(dcs), c.exchange)
		c.log.Warn("nack", "rabbitmq: RabbitMQ refused messages", "exchange", c.exchange, "err", cause)
		if c.cfg.maxQueueBytes > 0 {
			return channel.Refuse(channel.ErrFull, "a RabbitMQ queue of the channel is at its length limit", cause)
		}
		return channel.Refuse(channel.ErrUnavailable, "RabbitMQ did not store the events", cause)
	}
	return nil
}

// counted adds what Publish stored to the Len estimate of the consumers it was routed to.
func (c *Channel) counted(envs []channel.Envelope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range envs {
		for _, s := range envs[i].Subscriptions {
			if k := c.consumers[s]; k != nil {
				k.published.Add(1)
			}
		}
	}
}

// Consume returns the consumer of the subscription called name, declaring its queue
// when RabbitMQ can be reached (otherwise the consumer declares it once connected). A
// second call for an open subscription returns the same consumer. While a Remove of name
// is under way, Consume waits for it (until ctx ends) and then opens a new consumer on a
// new queue: that Remove neither closes it nor deletes its queue.
func (c *Channel) Consume(ctx context.Context, name string) (channel.Consumer, error) {
	c.mu.Lock()
	if err := c.awaitRemove(ctx, name); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.closed {
		c.mu.Unlock()
		return nil, channel.ErrClosed
	}
	if k := c.consumers[name]; k != nil {
		c.mu.Unlock()
		return k, nil
	}
	k := newConsumer(c, name)
	c.consumers[name] = k
	c.mu.Unlock()
	k.start()
	return k, nil
}

// forget drops k from the open consumers; called by k.Close.
func (c *Channel) forget(k *consumer) {
	c.mu.Lock()
	if c.consumers[k.name] == k {
		delete(c.consumers, k.name)
	}
	c.mu.Unlock()
}

// awaitRemove waits, with c.mu held (released meanwhile), until no Remove of name is
// under way, or ctx ends.
func (c *Channel) awaitRemove(ctx context.Context, name string) error {
	for {
		done := c.removing[name]
		if done == nil {
			return nil
		}
		c.mu.Unlock()
		select {
		case <-done:
			c.mu.Lock()
		case <-ctx.Done():
			c.mu.Lock()
			return fmt.Errorf("%w: rabbitmq: subscription %s: waiting for its removal: %w", channel.ErrUnavailable, name, ctx.Err())
		}
	}
}

// Remove closes the subscription's consumer if open and deletes its queue, with the
// events still in it — unless other consumers (other replicas whose configuration still
// has the trigger) consume it: the last replica to remove it deletes it. It acts on the
// consumer open when it is called only: Consume calls for name wait until it returns.
func (c *Channel) Remove(ctx context.Context, name string) error {
	c.mu.Lock()
	if err := c.awaitRemove(ctx, name); err != nil { // one Remove of name at a time
		c.mu.Unlock()
		return err
	}
	k := c.consumers[name]
	delete(c.consumers, name)
	done := make(chan struct{})
	c.removing[name] = done
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.removing, name)
		c.mu.Unlock()
		close(done)
	}()
	if k != nil {
		_ = k.Close()
	}
	s, err := c.waitSession(ctx)
	if err != nil {
		return fmt.Errorf("%w: rabbitmq: removing queue %s: not connected: %w", channel.ErrUnavailable, c.queue(name), err)
	}
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: rabbitmq: %w", channel.ErrUnavailable, err)
	}
	defer func() { _ = ch.Close() }()
	// A consumer's cancellation reaches a quorum queue's count shortly after the channel
	// closed: look again for up to a second before taking a consumer for another
	// replica's.
	q, err := ch.QueueDeclarePassive(c.queue(name), true, false, false, false, nil)
	for i := 0; i < 10 && err == nil && q.Consumers > 0 && ctx.Err() == nil; i++ {
		time.Sleep(100 * time.Millisecond)
		q, err = ch.QueueDeclarePassive(c.queue(name), true, false, false, false, nil)
	}
	switch {
	case amqpCode(err) == amqp.NotFound:
		err = nil
	case err != nil:
		return fmt.Errorf("%w: rabbitmq: inspecting queue %s: %w", channel.ErrUnavailable, c.queue(name), err)
	case q.Consumers > 0:
		c.cfg.logger.Info("rabbitmq: subscription removed here but its queue kept: other replicas still consume it",
			"subscription", name, "queue", q.Name, "consumers", q.Consumers)
	default:
		if _, err = ch.QueueDelete(c.queue(name), false, false, false); err != nil {
			return fmt.Errorf("%w: rabbitmq: deleting queue %s: %w", channel.ErrUnavailable, c.queue(name), err)
		}
	}
	c.mu.Lock()
	delete(c.declared, name)
	c.mu.Unlock()
	return err
}

// Close closes every consumer (RabbitMQ keeps their unsettled messages for the next)
// and the connection.
func (c *Channel) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	ks := make([]*consumer, 0, len(c.consumers))
	for _, k := range c.consumers {
		ks = append(ks, k)
	}
	c.mu.Unlock()
	for _, k := range ks {
		_ = k.Close()
	}
	c.end()
	c.wg.Wait()
	c.inspMu.Lock()
	if c.insp != nil {
		_ = c.insp.Close()
	}
	c.inspMu.Unlock()
	c.log.Close()
	return nil
}

// Check reports whether the channel is connected to RabbitMQ and may publish
// (channel.Checker): while it is not, Publish cannot store.
func (c *Channel) Check(context.Context) error {
	s := c.current()
	if s == nil {
		return channel.Refuse(channel.ErrUnavailable, "the channel's RabbitMQ is unreachable", nil)
	}
	if blocked, _ := s.isBlocked(); blocked {
		return channel.Refuse(channel.ErrUnavailable, "RabbitMQ blocks publishing (a memory or disk alarm)", nil)
	}
	return nil
}

// depth asks RabbitMQ for the ready messages of subscription sub's queue, on an AMQP
// channel kept for it (reopened after an error or a new connection).
func (c *Channel) depth(ctx context.Context, sub string) (int, error) {
	s := c.current()
	if s == nil {
		return 0, errors.New("not connected")
	}
	c.inspMu.Lock()
	defer c.inspMu.Unlock()
	if c.insp == nil || c.insp.IsClosed() || c.inspConn != s.conn {
		if c.insp != nil {
			_ = c.insp.Close()
		}
		ch, err := s.conn.Channel()
		if err != nil {
			c.insp = nil
			return 0, err
		}
		c.insp, c.inspConn = ch, s.conn
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	q, err := c.insp.QueueDeclarePassive(c.queue(sub), true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// stale reports whether t is older than lenEvery.
func stale(t time.Time) bool { return time.Since(t) >= lenEvery }
