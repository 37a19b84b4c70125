package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// sessionTimeout is the consumer group session timeout: how long a crashed process keeps
// its partitions before the group hands them to the process that replaced it.
const sessionTimeout = 10 * time.Second

// consumer is one subscription's consumer group member. One goroutine polls records and
// queues those routed to the subscription on ready (never more than max unsettled);
// another commits settled offsets every commit interval. It is safe for concurrent use.
type consumer struct {
	ch    *Channel
	name  string
	group string
	max   int
	cl    *kgo.Client

	ready  chan *message   // cap max: never blocks, as unacked <= max
	room   chan struct{}   // signalled when a message settles
	closed chan struct{}   // closed by Close
	ctx    context.Context // ends at Close: stops the loops
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	lag    atomic.Int64 // records past the group's settled position, any route (the lag metric)

	joined atomic.Bool // the group gave this member its share (possibly none) at least once

	catch   atomic.Pointer[catchUp] // nil unless it started in the past and may still be catching up (startfrom.go)
	latest  *channel.StartFrom      // opened from latest: poll resolves catch before its first fetch
	boundMu sync.Mutex              // held while moving catch's bound (moveBound)

	ownMu sync.Mutex
	owned map[int32]bool // partitions the group assigned to this member now

	mu      sync.Mutex
	parts   map[int32]*part
	skips   map[int32][][2]int64 // settled ranges read at assignment, until first fetch
	unacked int                  // messages queued or handed out and not settled
	fetched int64                // records fetched since the consumer opened, any route
	unread  unread               // the records not fetched yet, as of the last lag refresh
}

// unread is the count of a topic's records a consumer has not fetched, measured at a lag
// refresh (the records past its fetch position, or past the group's settled position for
// partitions it has not fetched), with the channel's produced count and the consumer's
// fetched count at that moment. Between refreshes the records not fetched are estimated
// as n + produced since − fetched since (never below zero): exact for a single process.
// With replicas it is off, until the next refresh, by what the others fetched of this
// process's records (counted too high) and what this consumer fetched of theirs (too low);
// with the load spread evenly the two roughly cancel.
type unread struct {
	n, produced, fetched int64
}

// now estimates the records not fetched, given the produced and fetched counts now.
func (u unread) now(produced, fetched int64) int64 {
	return max(0, u.n+(produced-u.produced)-(fetched-u.fetched))
}

// part is the state of one partition while it is assigned to the consumer.
type part struct {
	id   int32
	wm   *watermark
	next int64 // offset after the last record fetched
	gone bool  // revoked: settling its messages commits nothing
}

var _ channel.Consumer = (*consumer)(nil)

func newConsumer(c *Channel, name string, catch *catchUp, latest *channel.StartFrom) (*consumer, error) {
	k := &consumer{
		latest: latest,
		ch:     c,
		name:   name,
		group:  c.group(name),
		max:    maxUnacked,
		ready:  make(chan *message, maxUnacked),
		room:   make(chan struct{}, 1),
		closed: make(chan struct{}),
		parts:  make(map[int32]*part),
		skips:  make(map[int32][][2]int64),
		owned:  make(map[int32]bool),
	}
	k.catch.Store(catch)
	cl, err := kgo.NewClient(c.clientOpts(
		kgo.ConsumerGroup(k.group),
		kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(sessionTimeout),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
		// A fetch in flight holds back partitions assigned or loaded after it was sent:
		// keep it short so that they start soon.
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			k.assigned(ctx, cl, ps[c.topic])
			k.own(cl, "assigned", ps[c.topic], true)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			k.drop(ctx, ps[c.topic], true)
			k.own(cl, "revoked", ps[c.topic], false)
		}),
		kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, ps map[string][]int32) {
			k.drop(ctx, ps[c.topic], false)
			k.own(cl, "lost", ps[c.topic], false)
		}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka channel %s: consumer %s: %w", c.topic, name, err)
	}
	k.cl = cl
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.wg.Add(2)
	go k.poll()
	go k.commitLoop()
	return k, nil
}

// Joined reports whether the consumer has joined its group and been given its share of
// the partitions, possibly none (channel.Joiner): until then this replica takes no part
// in the subscription.
func (k *consumer) Joined() bool { return k.joined.Load() }

// own records a change of the partitions this member owns and logs it, so that the
// logs of a replica say what it owns after each rebalance.
func (k *consumer) own(cl *kgo.Client, what string, ids []int32, add bool) {
	k.ownMu.Lock()
	for _, id := range ids {
		if add {
			k.owned[id] = true
		} else {
			delete(k.owned, id)
		}
	}
	now := make([]int32, 0, len(k.owned))
	for id := range k.owned {
		now = append(now, id)
	}
	k.ownMu.Unlock()
	slices.Sort(now)
	ids = slices.Sorted(slices.Values(ids))
	member, gen := cl.GroupMetadata()
	if add {
		k.joined.Store(true)
	}
	if len(ids) == 0 && !add {
		return
	}
	k.ch.cfg.logger.Info("kafka: partitions "+what, "topic", k.ch.topic, "subscription", k.name,
		"partitions", ids, "owned", now, "member", member, "generation", gen)
}

// Receive returns the next message, blocking until one is fetched, ctx ends or the
// consumer is closed (channel.ErrClosed).
func (k *consumer) Receive(ctx context.Context) (channel.Message, error) {
	return channel.Receive(ctx, k.ready, k.closed)
}

// Len is what waits for this subscription: the records routed to it that were fetched and
// not settled, plus the records of the topic not fetched yet (an upper bound: their routes
// are read when they are fetched). See the package doc.
func (k *consumer) Len() int {
	produced := k.ch.produced.Load()
	k.mu.Lock()
	n := int64(k.unacked) + k.unread.now(produced, k.fetched)
	k.mu.Unlock()
	return int(n)
}

// Close stops fetching, commits what is settled and leaves the group. Messages not
// settled before Close are delivered again to the next consumer of the subscription.
func (k *consumer) Close() error {
	k.once.Do(func() {
		close(k.closed)
		k.cancel()
		k.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		k.commit(ctx)
		cancel()
		k.cl.AllowRebalance()
		k.cl.Close()
		k.ch.forget(k)
	})
	return nil
}

// poll fetches records while there is room for them and queues those routed here.
func (k *consumer) poll() {
	defer k.wg.Done()
	if k.latest != nil && !k.resolveLatest(*k.latest) {
		k.cl.AllowRebalance()
		return
	}
	for k.ctx.Err() == nil {
		k.mu.Lock()
		free := k.max - k.unacked
		k.mu.Unlock()
		if free <= 0 {
			select {
			case <-k.room:
			case <-k.ctx.Done():
			}
			continue
		}
		if err := k.ch.ensureTopic(k.ctx); err != nil {
			k.ch.log.Warn("consume", "kafka: cannot create topic; retrying", "topic", k.ch.topic, "subscription", k.name, "err", err)
			k.sleep(time.Second)
			continue
		}
		fs := k.cl.PollRecords(k.ctx, free)
		if fs.IsClientClosed() || k.ctx.Err() != nil {
			k.cl.AllowRebalance()
			return
		}
		failed := false
		fs.EachError(func(t string, p int32, err error) {
			failed = true
			k.ch.log.Warn("fetch", "kafka: fetch failed; retrying", "topic", t, "partition", p, "subscription", k.name, "err", err)
		})
		// A record past a catch-up's bound is judged once the bound moved at routing (the
		// broker routes to the subscription right after opening its triggers), or in the
		// grace after, moved again.
		for k.ctx.Err() == nil && k.pastBound(fs) {
			if !k.moveBound(k.ctx, true) {
				k.sleep(time.Second)
			}
		}
		if k.ctx.Err() != nil {
			k.cl.AllowRebalance()
			return
		}
		k.mu.Lock()
		fs.EachRecord(k.add)
		k.mu.Unlock()
		k.cl.AllowRebalance()
		if failed && fs.NumRecords() == 0 {
			k.sleep(500 * time.Millisecond)
		}
	}
}

func (k *consumer) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-k.ctx.Done():
	}
}

// add tracks r and queues it if it is routed to the subscription; called with k.mu held,
// in offset order per partition.
func (k *consumer) add(r *kgo.Record) {
	p := k.parts[r.Partition]
	if p == nil {
		p = &part{id: r.Partition, wm: newWatermark(k.skips[r.Partition])}
		delete(k.skips, r.Partition)
		k.parts[r.Partition] = p
	}
	p.next = r.Offset + 1
	k.fetched++
	if p.wm.skipped(r.Offset) || !routedTo(r, k.name) && !k.catches(r) {
		p.wm.add(r.Offset, r.LeaderEpoch, true)
		return
	}
	m := &message{k: k, ev: decodeRecord(r), p: p}
	m.seq = p.wm.add(r.Offset, r.LeaderEpoch, false)
	k.unacked++
	k.ready <- m
}

// settle ends m: ack advances its partition's watermark; either way its slot frees.
func (k *consumer) settle(m *message, ack bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m.done {
		return
	}
	m.done = true
	k.unacked--
	select {
	case k.room <- struct{}{}:
	default:
	}
	p := m.p
	if p.gone {
		return
	}
	if ack {
		p.wm.settle(m.seq)
	}
}

// assigned reads, for newly assigned partitions, the ranges of records past the
// committed offset that the previous owner settled, so that they are not delivered again.
func (k *consumer) assigned(ctx context.Context, cl *kgo.Client, ids []int32) {
	if len(ids) == 0 {
		return
	}
	offs, err := kadm.NewClient(cl).FetchOffsets(ctx, k.group)
	if err != nil {
		k.ch.log.Warn("assign", "kafka: cannot read commit metadata; records settled after the committed offset will be delivered again",
			"group", k.group, "err", err)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if o, ok := offs.Lookup(k.ch.topic, id); ok && o.Err == nil {
			if rs := decodeSkip(o.At, o.Metadata); rs != nil {
				k.skips[id] = rs
			}
		}
	}
}

// drop forgets revoked or lost partitions, committing their settled offsets first when
// they were revoked (the group still accepts our commits then).
func (k *consumer) drop(ctx context.Context, ids []int32, commit bool) {
	k.mu.Lock()
	offs := map[int32]commitOffset{}
	for _, id := range ids {
		delete(k.skips, id)
		p := k.parts[id]
		if p == nil {
			continue
		}
		if o, e, meta, ok := p.wm.take(); ok {
			offs[id] = commitOffset{kgo.EpochOffset{Epoch: e, Offset: o}, meta}
		}
		p.gone = true
		delete(k.parts, id)
	}
	k.mu.Unlock()
	select {
	case k.room <- struct{}{}:
	default:
	}
	if commit && len(offs) > 0 {
		if err := k.commitSync(ctx, offs); err != nil {
			k.ch.log.Warn("commit", "kafka: commit of revoked partitions failed; their records will be delivered again",
				"group", k.group, "err", err)
		}
	}
}

func (k *consumer) commitLoop() {
	defer k.wg.Done()
	t := time.NewTicker(k.ch.cfg.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-t.C:
			k.commit(k.ctx)
		}
	}
}

// commit commits the watermarks that moved since the last commit.
func (k *consumer) commit(ctx context.Context) {
	k.mu.Lock()
	offs := map[int32]commitOffset{}
	for id, p := range k.parts {
		if o, e, meta, ok := p.wm.take(); ok {
			offs[id] = commitOffset{kgo.EpochOffset{Epoch: e, Offset: o}, meta}
		}
	}
	k.mu.Unlock()
	if len(offs) == 0 {
		k.checkCaughtUp(ctx)
		return
	}
	if err := k.commitSync(ctx, offs); err != nil {
		if ctx.Err() == nil {
			k.ch.log.Warn("commit", "kafka: commit failed; retrying", "group", k.group, "err", err)
		}
		k.mu.Lock()
		for id := range offs {
			if p := k.parts[id]; p != nil {
				p.wm.dirty = true
			}
		}
		k.mu.Unlock()
		return
	}
	k.checkCaughtUp(ctx)
}

// commitOffset is a partition's commit: offset, epoch and metadata (settled ranges).
type commitOffset struct {
	kgo.EpochOffset
	meta string
}

func (k *consumer) commitSync(ctx context.Context, offs map[int32]commitOffset) error {
	eos := make(map[int32]kgo.EpochOffset, len(offs))
	for id, o := range offs {
		eos[id] = o.EpochOffset
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				if o, ok := offs[p.Partition]; ok && o.meta != "" {
					p.Metadata = &o.meta
				}
			}
		}
		return nil
	})
	var rerr error
	k.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{k.ch.topic: eos},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				rerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
						rerr = fmt.Errorf("partition %d: %w", p.Partition, err)
					}
				}
			}
		})
	return rerr
}

// positions returns the settled position of each tracked partition, for lag.
func (k *consumer) positions() (settled, fetched map[int32]int64, count int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	settled = make(map[int32]int64, len(k.parts))
	fetched = make(map[int32]int64, len(k.parts))
	for id, p := range k.parts {
		if p.wm.commit >= 0 {
			settled[id] = p.wm.commit
		}
		fetched[id] = p.next
	}
	return settled, fetched, k.fetched
}

// setUnread records the records not fetched as measured by a lag refresh: n at the
// moment the channel had produced produced records and the consumer fetched fetched.
func (k *consumer) setUnread(n, produced, fetched int64) {
	k.mu.Lock()
	k.unread = unread{n: n, produced: produced, fetched: fetched}
	k.mu.Unlock()
}

// message is one record routed to the subscription.
type message struct {
	k    *consumer
	ev   *event.Event
	p    *part
	seq  int64
	done bool // guarded by k.mu
}

var _ channel.Message = (*message)(nil)

// errAckAfterClose is returned by Ack after the consumer closed: the settlement cannot be
// committed any more and the event will be delivered again.
var errAckAfterClose = errors.New("kafka: ack after consumer close; the event will be delivered again")

func (m *message) Event() *event.Event { return m.ev }

// Ack settles the message; its offset is committed once every earlier record of its
// partition is settled too.
func (m *message) Ack() error {
	select {
	case <-m.k.closed:
		m.k.settle(m, false)
		return fmt.Errorf("%w: %w", channel.ErrClosed, errAckAfterClose)
	default:
	}
	m.k.settle(m, true)
	return nil
}

// Release gives the message up unsettled: it is delivered again after the subscription's
// consumer restarts, and holds its partition's commit back until then. It reports true.
func (m *message) Release() bool {
	m.k.settle(m, false)
	return true
}
