package kinesis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

// Channel is a Kinesis channel: one stream per broker, one reader per subscription and
// shard. It is safe for concurrent use.
type Channel struct {
	cfg    config
	api    *kinesis.Client
	stream string
	log    *ratelog.Logger
	pub    *publisher
	life   context.Context // ends at Close: ends the PutRecords calls in flight
	end    context.CancelFunc
	leases *leaseTable // nil without WithLeaseTable

	mu        sync.Mutex
	consumers map[string]*consumer
	closed    bool
}

var (
	_ channel.Channel = (*Channel)(nil)
	_ channel.Durable = (*Channel)(nil)
)

// Durable reports true: what the channel stored survives the process (channel.Durable).
func (c *Channel) Durable() bool { return true }

// New returns the channel of the broker called brokerKey ("namespace/name"). Without
// WithStream it creates the broker's stream (StreamName) with WithShards shards if it
// does not exist, and waits until it is active, within ctx.
func New(ctx context.Context, brokerKey string, opts ...Option) (*Channel, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("kinesis channel: %w", err)
	}
	c := &Channel{cfg: cfg, api: cfg.api, stream: cfg.stream, log: ratelog.New(cfg.logger),
		consumers: make(map[string]*consumer)}
	if c.stream == "" {
		c.stream = StreamName(brokerKey)
		if err := c.createStream(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.waitActive(ctx); err != nil {
		return nil, err
	}
	if err := c.applyRetention(ctx); err != nil { // retention.go
		return nil, err
	}
	if cfg.leaseTable != "" {
		c.leases = &leaseTable{api: cfg.leaseAPI, name: cfg.leaseTable, owner: newOwner(), duration: cfg.leaseDuration}
		if err := c.leases.ensure(ctx); err != nil {
			return nil, fmt.Errorf("%w: %w", channel.ErrUnavailable, err)
		}
	}
	c.life, c.end = context.WithCancel(context.Background())
	c.pub = newPublisher(c)
	return c, nil
}

// StreamName is the stream of the broker called brokerKey: "sluice.<namespace>.<name>",
// with characters Kinesis does not allow replaced by '_'.
func StreamName(brokerKey string) string {
	name := "sluice." + strings.ReplaceAll(brokerKey, "/", ".")
	b := []byte(name)
	for i, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}

// Stream returns the name of the channel's stream.
func (c *Channel) Stream() string { return c.stream }

func (c *Channel) createStream(ctx context.Context) error {
	_, err := c.api.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(c.stream), ShardCount: aws.Int32(c.cfg.shards)})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("%w: kinesis: creating stream %s: %w", channel.ErrUnavailable, c.stream, err)
	}
	return nil
}

// waitActive waits until the stream can be written to (ACTIVE or UPDATING).
func (c *Channel) waitActive(ctx context.Context) error {
	for {
		out, err := c.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(c.stream)})
		if err != nil {
			return fmt.Errorf("%w: kinesis: stream %s: %w", channel.ErrUnavailable, c.stream, err)
		}
		switch out.StreamDescriptionSummary.StreamStatus {
		case types.StreamStatusActive, types.StreamStatusUpdating:
			return nil
		case types.StreamStatusDeleting:
			return fmt.Errorf("%w: kinesis: stream %s is being deleted", channel.ErrUnavailable, c.stream)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: kinesis: stream %s not active: %w", channel.ErrUnavailable, c.stream, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Publish stores envs and returns once every record is stored. Records go out in
// PutRecords calls of at most 500 records and 5 MiB, shared with concurrent Publish calls
// (see publisher); entries a call fails (throttled, internal error) are sent again,
// alone. Throttling that persists over three tries returns an error wrapping
// channel.ErrFull (ingress answers 429); a stream that cannot be reached returns one
// wrapping channel.ErrUnavailable when ctx ends (503). On error some events may be stored
// all the same: the client's retry then stores them twice (at-least-once).
func (c *Channel) Publish(ctx context.Context, envs []channel.Envelope) error {
	var reqs []*putReq
	var cur *putReq
	for i := range envs {
		env := &envs[i]
		if len(env.Subscriptions) == 0 {
			continue
		}
		data := appendFrame(make([]byte, 0, env.Event.Size()+64), env.Event, env.Subscriptions)
		key, _ := env.Event.Get("partitionkey")
		if key == "" {
			key = randomKey()
		}
		size := len(data) + len(key)
		if size > maxRecordBytes {
			return channel.Refuse(channel.ErrTooLarge,
				fmt.Sprintf("event %s is %d bytes encoded, over Kinesis's 1 MiB record limit", env.Event.ID, len(data)), nil)
		}
		if cur == nil || len(cur.entries) == maxBatchRecords || cur.size+size > maxBatchBytes {
			cur = &putReq{ctx: ctx, done: make(chan error, 1)}
			reqs = append(reqs, cur)
		}
		cur.entries = append(cur.entries, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(key)})
		cur.size += size
	}
	if len(reqs) == 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return channel.ErrClosed
		}
		return nil
	}
	return c.pub.put(reqs)
}

// put stores one batch, trying the failed entries again.
func (c *Channel) put(ctx context.Context, entries []types.PutRecordsRequestEntry) error {
	throttled := 0
	for attempt := 0; ; attempt++ {
		out, err := c.api.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(c.stream), Records: entries})
		var failed []types.PutRecordsRequestEntry
		var cause error
		throttle := false
		switch {
		case err != nil:
			if throttle = isThrottle(err); !throttle && ctx.Err() != nil {
				return channel.Refuse(channel.ErrUnavailable, "Kinesis did not take the events in time", fmt.Errorf("kinesis: PutRecords to %s: %w", c.stream, err))
			}
			if !throttle {
				c.log.Warn("put", "kinesis: PutRecords failed; trying again", "stream", c.stream, "err", err)
			}
			failed, cause = entries, err
		case aws.ToInt32(out.FailedRecordCount) == 0:
			return nil
		default:
			for i, r := range out.Records {
				if r.ErrorCode == nil {
					continue
				}
				failed = append(failed, entries[i])
				cause = fmt.Errorf("%s: %s", aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
				throttle = throttle || aws.ToString(r.ErrorCode) == "ProvisionedThroughputExceededException"
			}
		}
		if throttle {
			if throttled++; throttled >= 3 {
				return channel.Refuse(channel.ErrFull, "Kinesis is throttling writes to the channel's stream", fmt.Errorf("kinesis: stream %s throttled: %w", c.stream, cause))
			}
		}
		entries = failed
		wait := min(50*time.Millisecond<<min(attempt, 5), time.Second)
		select {
		case <-ctx.Done():
			return channel.Refuse(channel.ErrUnavailable, "Kinesis did not take the events in time",
				fmt.Errorf("kinesis: PutRecords to %s: %w (%w)", c.stream, ctx.Err(), cause))
		case <-time.After(wait):
		}
	}
}

// isThrottle reports whether err is Kinesis's throttling of a whole call.
func isThrottle(err error) bool {
	var pt *types.ProvisionedThroughputExceededException
	var le *types.LimitExceededException
	return errors.As(err, &pt) || errors.As(err, &le)
}

// randomKey is the partition key of an event without a partitionkey extension: random,
// so that such events spread over the shards.
func randomKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Consume returns the consumer of the subscription called name, starting at its
// checkpoint (or the oldest record of each shard). A second call for an open
// subscription returns the same consumer.
func (c *Channel) Consume(ctx context.Context, name string) (channel.Consumer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	if k := c.consumers[name]; k != nil {
		return k, nil
	}
	return c.openLocked(name, channel.StartFrom{}, nil, nil)
}

// openLocked opens the consumer of the subscription called name, with the filter
// from.Match of its catch-up if it has one (in its checkpoint file, or leased with a
// lease table) and from.Routed to move its end, seeding the leases it creates from seed
// (a removed subscription's) if not nil. Called with c.mu held.
func (c *Channel) openLocked(name string, from channel.StartFrom, leased *startMark, seed *checkpoint) (channel.Consumer, error) {
	k, err := newConsumer(c, name, from, leased, seed)
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

// Remove closes the subscription's consumer if open and marks its checkpoint removed:
// a subscription of the same name opened later resumes from it (ConsumeFrom: with a
// catch-up of what was stored meanwhile), and a checkpoint removed longer ago than the
// stream's retention period is deleted (sweepRemoved). With a lease table it deletes
// its leases and checkpoint instead. Its records stay in the stream until its retention
// period ends and are not delivered. With a lease table, the leases are kept while another live
// replica owns one (it still reads the subscription; the last replica to remove it
// deletes them); those of a replica gone are deleted once seen unrenewed for the lease
// duration, and an error says so if ctx ends before. A failure to close the consumer is
// returned only when the checkpoint or leases it could not write are kept.
func (c *Channel) Remove(ctx context.Context, name string) error {
	c.mu.Lock()
	k := c.consumers[name]
	c.mu.Unlock()
	var closeErr error
	var seen map[string]sighting
	if k != nil {
		closeErr = k.Close()
		seen = k.obs.seen // the follow goroutine has ended
	}
	if c.leases != nil {
		keep := func(ls []lease) error { return c.keepRemoved(ctx, name, ls) }
		if err := c.leases.removeGroupThen(ctx, leaseGroup(c.stream, name), seen, keep); err != nil {
			return errors.Join(closeErr, err)
		}
		c.sweepRemovedLeased(ctx)
	}
	if c.cfg.checkpointDir == "" {
		return nil
	}
	path := checkpointPath(c.cfg.checkpointDir, c.stream, name)
	if c.leases != nil {
		if err := removeCheckpoint(path); err != nil {
			return errors.Join(closeErr, err)
		}
		return nil
	}
	if err := markRemoved(path, name, time.Now()); err != nil {
		return errors.Join(closeErr, err)
	}
	c.sweepRemoved(ctx)
	return nil
}

// Close closes every consumer, writing its checkpoint. Unsettled records stay in the
// stream and are delivered again after a restart.
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
	var errs []error
	for _, k := range ks {
		errs = append(errs, k.Close())
	}
	c.end() // PutRecords calls in flight end; their Publish calls get ErrUnavailable
	c.pub.close()
	return errors.Join(errs...)
}
