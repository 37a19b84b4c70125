package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

// Channel is the durable channel of one broker on JetStream. It is safe for concurrent
// use. It does not own the NATS connection: close the connection after the Channel.
type Channel struct {
	cfg         config
	nc          *nats.Conn
	js          jetstream.JetStream
	log         *slog.Logger
	plog        *ratelog.Logger // publish failures: one line per ratelog.Every while they repeat
	brokerKey   string
	stream      string // stream name
	subjBase    string // PREFIX.<broker-hash>.
	archive     string // the archive stream, "" without a retention (archive.go)
	archiveSubj string // its subject
	metrics     *collector
	conn        *connWatch

	subs sync.Map // subscription name -> *subscription

	mu        sync.Mutex
	consumers map[*Consumer]struct{}
	closed    atomic.Bool
}

var (
	_ channel.Channel = (*Channel)(nil)
	_ channel.Durable = (*Channel)(nil)
	_ channel.Checker = (*Channel)(nil)
)

// Durable reports true: what the channel stored survives the process (channel.Durable).
func (c *Channel) Durable() bool { return true }

// New opens the channel of the broker called brokerKey (any string, "namespace/name"
// say) on the JetStream server nc is connected to, creating or updating its stream.
// Channels of the same broker key on several connections to one cluster share the
// stream and the subscriptions' consumers: each message goes to one of them.
func New(ctx context.Context, nc *nats.Conn, brokerKey string, opts ...Option) (*Channel, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if brokerKey == "" {
		return nil, errors.New("jetstream: empty broker key")
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPublishPending),
		jetstream.WithPublishAsyncTimeout(publishTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	bh := hashToken(brokerKey)
	log := cfg.logger.With("channel", "jetstream", "broker", brokerKey)
	c := &Channel{
		cfg:       cfg,
		nc:        nc,
		js:        js,
		log:       log,
		plog:      ratelog.New(log),
		brokerKey: brokerKey,
		stream:    prefix + "_" + bh,
		subjBase:  prefix + "." + bh + ".",
		consumers: make(map[*Consumer]struct{}),
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        c.stream,
		Description: "sluice broker " + brokerKey,
		Subjects:    []string{c.subjBase + "*"},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    cfg.maxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.replicas,
		Metadata:    map[string]string{"sluice.broker": brokerKey},
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: create stream %s for broker %q: %w", c.stream, brokerKey, unavailable(err))
	}
	if err := c.openArchive(ctx, bh); err != nil {
		return nil, err
	}
	if c.archive != "" {
		if err := c.sweepRemoved(ctx); err != nil { // startfrom.go
			return nil, err
		}
	}
	c.conn = watchConn(nc)
	if cfg.registerer != nil {
		c.metrics = newCollector(c)
		if err := cfg.registerer.Register(c.metrics); err != nil {
			c.conn.stop()
			return nil, fmt.Errorf("jetstream: register metrics for broker %q: %w", brokerKey, err)
		}
	}
	return c, nil
}

// Stream returns the name of the broker's stream.
func (c *Channel) Stream() string { return c.stream }

// subscription is what this process knows of one subscription: its subject, and how
// many messages it has published to it and acknowledged of it, which move
// Consumer.Len's estimate between two asks of the server.
type subscription struct {
	subject   string
	published atomic.Int64
	acked     atomic.Int64
}

// sub returns the subscription called name.
func (c *Channel) sub(name string) *subscription {
	if s, ok := c.subs.Load(name); ok {
		return s.(*subscription)
	}
	s, _ := c.subs.LoadOrStore(name, &subscription{subject: c.subjBase + hashToken(name)})
	return s.(*subscription)
}

// subject returns the subject the messages for the subscription called name are stored
// under.
func (c *Channel) subject(name string) string { return c.sub(name).subject }

// durable returns the durable consumer name of the subscription called name.
func (c *Channel) durable(name string) string {
	return prefix + "_" + hashToken(name)
}

func (c *Channel) consumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.durable(name),
		Description:   "sluice subscription " + name,
		FilterSubject: c.subject(name),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.ackWait,
		MaxDeliver:    -1,
		MaxAckPending: maxAckPending,
		Metadata:      map[string]string{"sluice.broker": c.brokerKey, "sluice.subscription": name},
	}
}

// Consume opens the subscription called name, creating its durable consumer if new, and
// starts fetching its messages. Events published to name before the first Consume are
// kept: the stream holds them until a consumer settles them. Several Consumers of one
// name, in this process or in others, share the messages.
func (c *Channel) Consume(ctx context.Context, name string) (channel.Consumer, error) {
	if c.closed.Load() {
		return nil, channel.ErrClosed
	}
	jc, err := c.js.CreateOrUpdateConsumer(ctx, c.stream, c.consumerConfig(name))
	if err != nil {
		return nil, fmt.Errorf("jetstream: open subscription %q of broker %q: %w", name, c.brokerKey, unavailable(err))
	}
	return c.open(name, jc)
}

// open starts consuming the subscription called name from its durable consumer jc.
func (c *Channel) open(name string, jc jetstream.Consumer) (*Consumer, error) {
	if info := jc.CachedInfo(); info != nil {
		c.log.Info("jetstream: consuming the subscription's durable consumer, shared with every replica that has it",
			"subscription", name, "consumer", c.durable(name), "stream", c.stream, "stream_replicas", c.cfg.replicas,
			"pulls_waiting", info.NumWaiting, "pending", info.NumPending)
	}
	cons := newConsumer(c, name, jc)
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		_ = cons.Close()
		return nil, channel.ErrClosed
	}
	c.consumers[cons] = struct{}{}
	c.mu.Unlock()
	cons.start()
	return cons, nil
}

// forget drops cons from the open consumers.
func (c *Channel) forget(cons *Consumer) {
	c.mu.Lock()
	delete(c.consumers, cons)
	c.mu.Unlock()
}

// openConsumers returns the open consumers.
func (c *Channel) openConsumers() []*Consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Consumer, 0, len(c.consumers))
	for cons := range c.consumers {
		out = append(out, cons)
	}
	return out
}

// Remove closes this process's consumers of the subscription called name, then deletes
// its durable consumer and purges the events stored for it — unless another replica
// still consumes it (a pull request of its waiting at the server, looked for during a
// second while messages are pending): a trigger removed from one replica's configuration
// but still in another's keeps its events. A replica that issued no pull request during
// that second (every one of its in-flight slots held by a stalled subscriber) is not
// seen; it re-creates the consumer, without the purged events. Without an archive the
// consumer is then left to the replicas that have it, with an inactive threshold of
// InactiveThreshold: the server deletes it once no replica has pulled from it for that
// long (its events stay in the stream, and a replica that opens the subscription again
// gets them). With an archive (WithRetention) the consumer and its events are kept in
// either case, with no inactive threshold, marked removed, for a subscription re-created
// with the name to resume (ConsumeFrom); one neither re-created nor pulled from within
// the retention is deleted then, with its events.
func (c *Channel) Remove(ctx context.Context, name string) error {
	if c.closed.Load() {
		return channel.ErrClosed
	}
	for _, cons := range c.openConsumers() {
		if cons.name == name {
			_ = cons.Close()
		}
	}
	inUse, err := c.keepShared(ctx, name)
	switch {
	case err != nil:
		return err
	case c.archive != "": // startfrom.go: marked, kept for a trigger re-created with its name
		return c.keepRemoved(ctx, name)
	case inUse:
		return nil
	}
	return c.deleteSubscription(ctx, name)
}

// deleteSubscription deletes the durable consumer of the subscription called name and
// purges the events stored for it.
func (c *Channel) deleteSubscription(ctx context.Context, name string) error {
	err := c.js.DeleteConsumer(ctx, c.stream, c.durable(name))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("jetstream: remove subscription %q of broker %q: %w", name, c.brokerKey, unavailable(err))
	}
	s, err := c.js.Stream(ctx, c.stream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(c.subject(name)))
	}
	if err != nil {
		return fmt.Errorf("jetstream: purge subscription %q of broker %q: %w", name, c.brokerKey, unavailable(err))
	}
	return nil
}

// InactiveThreshold is how long a subscription's durable consumer, kept by Remove
// because another replica still used it, outlives the last pull of any replica, on a
// channel without an archive (with one, it is kept for the retention).
const InactiveThreshold = time.Hour

// keepShared reports whether another replica still consumes the subscription called
// name; if so it logs that it was kept and, without an archive, sets the consumer's
// inactive threshold.
func (c *Channel) keepShared(ctx context.Context, name string) (bool, error) {
	// Another replica consuming the subscription has a pull request waiting at the
	// server, or issues one soon after each batch. Messages still pending tell nothing:
	// a message the server was sending to this process as it closed stays pending too.
	// So while some are, pull requests are looked for during a second.
	deadline := time.Now().Add(time.Second)
	var info *jetstream.ConsumerInfo
	for {
		jc, err := c.js.Consumer(ctx, c.stream, c.durable(name))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("jetstream: remove subscription %q of broker %q: %w", name, c.brokerKey, unavailable(err))
		}
		info = jc.CachedInfo()
		if info.NumWaiting > 0 {
			break
		}
		if info.NumAckPending == 0 || time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return false, fmt.Errorf("jetstream: remove subscription %q of broker %q: %w", name, c.brokerKey, unavailable(ctx.Err()))
		}
	}
	if c.archive != "" {
		// keepRemoved keeps it for the retention, with no inactive threshold: the
		// server would delete it, and strand its events in the stream, before then.
		c.log.Info("jetstream: subscription removed here but kept: other replicas still consume it",
			"subscription", name, "consumer", c.durable(name), "waiting_pulls", info.NumWaiting,
			"ack_pending", info.NumAckPending)
		return true, nil
	}
	// The consumer's own configuration, so that nothing another replica recorded in
	// it is lost.
	cfg := info.Config
	cfg.InactiveThreshold = c.cfg.inactive
	if _, err := c.js.UpdateConsumer(ctx, c.stream, cfg); err != nil {
		return true, fmt.Errorf("jetstream: keep subscription %q of broker %q for its other replicas: %w", name, c.brokerKey, unavailable(err))
	}
	c.log.Info("jetstream: subscription removed here but kept: other replicas still consume it",
		"subscription", name, "consumer", c.durable(name), "waiting_pulls", info.NumWaiting,
		"ack_pending", info.NumAckPending, "inactive_threshold", c.cfg.inactive)
	return true, nil
}

// Close closes the channel's consumers and unregisters its metrics. Stored events stay
// in the stream; the NATS connection stays open.
func (c *Channel) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	for _, cons := range c.openConsumers() {
		_ = cons.Close()
	}
	if c.metrics != nil {
		c.cfg.registerer.Unregister(c.metrics)
	}
	c.conn.stop()
	return nil
}

// Check reports whether the NATS connection is up (channel.Checker): while it is not,
// Publish cannot store.
func (c *Channel) Check(context.Context) error {
	if st := c.nc.Status(); st != nats.CONNECTED {
		return channel.Refuse(channel.ErrUnavailable, "the channel's JetStream server is unreachable", fmt.Errorf("nats connection %s", st))
	}
	return nil
}
