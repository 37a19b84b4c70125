// Package kafka is the durable channel for users who already run Apache Kafka. A broker's
// events live in one topic; each subscription (trigger) reads it through a consumer group
// of its own.
//
// # Layout
//
// Publish writes each event once, as one record in the CloudEvents Kafka binding's binary
// mode (attributes as "ce_<name>" headers, datacontenttype as "content-type", data as the
// value, the partitionkey extension as the key, like Knative's Kafka channel), plus one
// "sluice-sub" header per subscription ingress routed it to. Every subscription's group
// reads every record and settles at once those not routed to it. Storing once keeps the
// write path to one produce per event however many triggers match, at the cost of each
// group scanning the others' records; a topic per trigger would multiply writes instead.
// A group new to the cluster starts at the earliest offset, so events routed to a
// subscription before its first commit are never skipped.
//
// # Guarantees
//
// Publish returns nil only after the cluster acknowledged every record with acks=all
// (idempotent producer); when the cluster is unreachable it returns an error wrapping
// channel.ErrUnavailable no later than its context ends. A consumer commits, per
// partition, only the prefix of records that are all settled (Ack, or not routed to it),
// so a crash or restart delivers again every record not acknowledged, and possibly some
// that were (at-least-once). Release leaves a record unsettled: it is delivered again when
// its partition is next assigned (after a restart), and holds that partition's commit back
// until then.
//
// Consume hands out each partition's records in offset order, at most 1,024 unsettled at
// once. Events with the same partitionkey share a partition, so they are handed out in the
// order they were published; the dispatcher keeps ordered triggers' per-key order from
// there.
//
// Consumer.Len counts the records routed to the subscription that it has fetched and not
// settled, plus the records of the topic it has not fetched yet (their routes are unknown
// until read, so that part is an upper bound). The end offsets it is computed from are
// refreshed every lag interval; between refreshes the count moves with what this process
// produced to the topic and what the subscription fetched since, so that a burst of
// publishes shows in Len at once (the broker's backlog bound reads it on every request)
// instead of up to a lag interval later (exact for one process; with replicas it may be
// off either way until the next refresh). Nothing is asked of the cluster when Len is
// called. Once a subscription has read to the end of the topic, Len is exact.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

// Channel is a Kafka channel: one topic, one consumer group per subscription. It is safe
// for concurrent use.
type Channel struct {
	cfg   config
	topic string
	cl    *kgo.Client // producer and admin requests
	adm   *kadm.Client
	log   *ratelog.Logger
	met   *metrics

	topicReady atomic.Bool
	topicSem   chan struct{} // one topic creation at a time
	produced   atomic.Int64  // records this process produced to the topic (acknowledged)

	mu        sync.Mutex
	consumers map[string]*consumer
	closed    bool

	life context.Context // ends at Close: stops the lag refresh and its requests
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

// New returns the channel of the broker called brokerKey ("namespace/name"). It tries to
// create the topic if absent, within ctx and at most 10 seconds; if the cluster cannot be
// reached it logs why and tries again on first use, so a broker can start before Kafka.
func New(ctx context.Context, brokerKey string, opts ...Option) (*Channel, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kafka channel: %w", err)
	}
	c := &Channel{
		cfg:       cfg,
		topic:     TopicName(cfg.prefix, brokerKey),
		log:       ratelog.New(cfg.logger),
		topicSem:  make(chan struct{}, 1),
		consumers: make(map[string]*consumer),
	}
	if cfg.topic != "" {
		c.topic = cfg.topic
		c.topicReady.Store(true) // an external topic is never created
	}
	cl, err := kgo.NewClient(c.clientOpts(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.ProducerLinger(linger),
		kgo.UnknownTopicRetries(-1),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka channel %s: %w", c.topic, err)
	}
	c.cl = cl
	c.adm = kadm.NewClient(cl)
	c.met = newMetrics(c)
	if cfg.registerer != nil {
		if err := cfg.registerer.Register(c.met); err != nil {
			cl.Close()
			return nil, fmt.Errorf("kafka channel %s: registering metrics: %w", c.topic, err)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := c.ensureTopic(tctx); err != nil {
		c.log.Warn("topic", "kafka: cannot create topic yet; retrying on first use", "topic", c.topic, "err", err)
	} else {
		c.checkPartitions(tctx)
	}
	cancel()
	c.life, c.end = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.refreshLag()
	return c, nil
}

// clientOpts are the options every client of c shares, then extra.
func (c *Channel) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(c.cfg.brokers...),
		kgo.WithLogger(kgoLogger{c.cfg.logger}),
		kgo.DialTimeout(5 * time.Second),
	}, extra...)
}

// TopicName is the topic of the broker called brokerKey: "<prefix>.<brokerKey>" with '/'
// turned into '.' and every character Kafka does not allow into '_'.
func TopicName(prefix, brokerKey string) string {
	name := []byte(prefix + "." + strings.ReplaceAll(brokerKey, "/", "."))
	for i, b := range name {
		ok := b == '.' || b == '_' || b == '-' || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') || ('0' <= b && b <= '9')
		if !ok {
			name[i] = '_'
		}
	}
	if len(name) > 249 {
		name = name[:249]
	}
	return string(name)
}

// Topic is the channel's topic.
func (c *Channel) Topic() string { return c.topic }

// group is the consumer group of the subscription called name.
func (c *Channel) group(name string) string { return c.topic + "/" + name }

// ensureTopic creates the topic if it does not exist yet.
func (c *Channel) ensureTopic(ctx context.Context) error {
	if c.topicReady.Load() {
		return nil
	}
	select {
	case c.topicSem <- struct{}{}:
		defer func() { <-c.topicSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.topicReady.Load() {
		return nil
	}
	rf := c.cfg.replication
	if rf == 0 {
		rf = -1 // the cluster's default.replication.factor
	}
	resp, err := c.adm.CreateTopic(ctx, c.cfg.partitions, rf, c.cfg.topicConfigs(rf), c.topic)
	switch {
	case err == nil:
		c.cfg.logger.Info("kafka: topic created", "topic", c.topic, "partitions", resp.NumPartitions, "replication_factor", resp.ReplicationFactor)
	case errors.Is(err, kerr.TopicAlreadyExists):
	default:
		return fmt.Errorf("creating topic %s: %w", c.topic, err)
	}
	if err := c.applyRetention(ctx); err != nil {
		return err
	}
	c.topicReady.Store(true)
	return nil
}

// checkPartitions warns when the topic has a single partition: each subscription's
// group then reads it with one replica only, however many run.
func (c *Channel) checkPartitions(ctx context.Context) {
	td, err := c.adm.ListTopics(ctx, c.topic)
	if err != nil {
		return
	}
	if d, ok := td[c.topic]; ok && d.Err == nil && len(d.Partitions) == 1 {
		c.cfg.logger.Warn("kafka: the topic has a single partition: one replica reads each trigger, the others stay idle; create it with more partitions to share the work",
			"topic", c.topic)
	}
}

// publishCall collects the results of one Publish call's records.
type publishCall struct {
	recs    []kgo.Record
	pending atomic.Int32
	done    chan struct{}
	errOnce sync.Once
	err     error
}

// Publish writes one record per envelope routed to at least one subscription and returns
// once the cluster acknowledged all of them (acks=all), or with an error wrapping
// channel.ErrUnavailable when one failed or ctx ended first. Records of a failed call
// may still be stored; they are then delivered like any other (at-least-once).
func (c *Channel) Publish(ctx context.Context, envs []channel.Envelope) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return channel.ErrClosed
	}
	n := 0
	for i := range envs {
		if len(envs[i].Subscriptions) > 0 {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := c.ensureTopic(ctx); err != nil {
		c.met.publishErrors.Add(float64(n))
		c.log.Warn("publish", "kafka: publish failed", "topic", c.topic, "err", err)
		return channel.Refuse(channel.ErrUnavailable, "Kafka is unreachable or refused the channel's topic", fmt.Errorf("kafka topic %s: %w", c.topic, err))
	}
	call := &publishCall{recs: make([]kgo.Record, n), done: make(chan struct{})}
	call.pending.Store(int32(n))
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			call.errOnce.Do(func() { call.err = err })
		} else {
			c.produced.Add(1)
		}
		if call.pending.Add(-1) == 0 {
			close(call.done)
		}
	}
	j := 0
	for i := range envs {
		if len(envs[i].Subscriptions) == 0 {
			continue
		}
		r := &call.recs[j]
		j++
		fillRecord(r, c.topic, &envs[i])
		c.cl.Produce(ctx, r, promise)
	}
	var err error
	select {
	case <-call.done:
		err = call.err
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.met.publishErrors.Add(float64(n))
		c.log.Warn("publish", "kafka: publish failed", "topic", c.topic, "err", err)
		cause := fmt.Errorf("kafka produce to %s: %w", c.topic, err)
		switch {
		case errors.Is(err, kerr.MessageTooLarge): // the producer's batch limit or the topic's
			return channel.Refuse(channel.ErrTooLarge, "event larger than Kafka's largest message", cause)
		case ctx.Err() != nil:
			return channel.Refuse(channel.ErrUnavailable, "Kafka did not acknowledge the events in time", cause)
		}
		return channel.Refuse(channel.ErrUnavailable, "Kafka did not store the events", cause)
	}
	c.met.published.Add(float64(n))
	return nil
}

// Consume returns the consumer of the subscription called name, joining its consumer
// group: each partition's records in offset order, at most 1,024 unsettled. A second
// call for an open subscription returns the same consumer. It does not wait for the
// cluster: an unreachable cluster is logged and retried by the consumer.
func (c *Channel) Consume(_ context.Context, name string) (channel.Consumer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	if k := c.consumers[name]; k != nil {
		return k, nil
	}
	k, err := newConsumer(c, name, nil, nil)
	if err != nil {
		return nil, err
	}
	c.consumers[name] = k
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

// Remove closes the subscription's consumer if open (leaving its consumer group). The
// group stays, with its committed offsets: other replicas whose configuration still has
// the trigger go on with it, and a trigger re-created with the same name resumes where
// it stopped (ConsumeFrom). The last replica to remove it marks it removed, with a group
// <group>/removed (Kafka drops an empty group's offsets after its
// offsets.retention.minutes: a trigger re-created later than that starts anew). Its
// records stay in the topic (until retention removes them) and are not delivered.
func (c *Channel) Remove(ctx context.Context, name string) error {
	c.mu.Lock()
	k := c.consumers[name]
	c.mu.Unlock()
	if k != nil {
		_ = k.Close()
	}
	groups, err := c.adm.DescribeGroups(ctx, c.group(name))
	if err == nil {
		err = groups.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("%w: kafka: describing group %s: %w", channel.ErrUnavailable, c.group(name), err)
	}
	if g, ok := groups[c.group(name)]; ok && len(g.Members) > 0 {
		c.cfg.logger.Info("kafka: subscription removed here but its group kept: other replicas still consume it",
			"subscription", name, "group", c.group(name), "members", len(g.Members))
		return nil
	}
	if err := c.markRemoved(ctx, name); err != nil { // startfrom.go
		return fmt.Errorf("%w: kafka: removing subscription %s: %w", channel.ErrUnavailable, name, err)
	}
	return nil
}

// Close closes every consumer (committing what they settled), waits for records being
// produced, and releases the clients. Unsettled records stay in the topic.
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
	if c.cfg.registerer != nil {
		c.cfg.registerer.Unregister(c.met)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.cl.Flush(ctx); err != nil {
		c.log.Warn("close", "kafka: records still buffered at close", "topic", c.topic, "err", err)
	}
	c.cl.Close() // also ends the lag refresh's requests
	c.wg.Wait()
	return nil
}

// Check reports whether a broker of the cluster answers (channel.Checker): while none
// does, Publish cannot store.
func (c *Channel) Check(ctx context.Context) error {
	if err := c.cl.Ping(ctx); err != nil {
		return channel.Refuse(channel.ErrUnavailable, "the channel's Kafka cluster is unreachable", err)
	}
	return nil
}
