package kinesis

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// consumer is one subscription's reader of the stream: one goroutine per shard reads
// records from the shard's checkpoint and queues those routed to the subscription on
// ready (at most maxUnacked unsettled); one goroutine follows the stream's shards
// (starting a child once its parents are finished) and writes the checkpoint every
// checkpoint interval. It is safe for concurrent use.
type consumer struct {
	ch   *Channel
	name string
	path string

	ready  chan *message   // cap maxUnacked: never blocks, as unsettled <= maxUnacked
	slots  chan struct{}   // one per unsettled message
	closed chan struct{}   // closed by Close
	ctx    context.Context // ends at Close: stops the loops
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu      sync.Mutex
	cp      checkpoint
	dirty   bool
	shards  map[string]*shard // readers started, by shard id
	unacked int

	// With a lease table (ch.leases): used by the follow goroutine, then by Close.
	// start and match: the catch-up of a subscription started in the past (startfrom.go),
	// nil otherwise. match is set before the readers start, then only read; start is
	// guarded by mu (extendCatchUp moves its end).
	start *startMark
	match func(channel.Stored) bool
	// extended, when not nil, is closed once the catch-up's end has moved to when the
	// broker routed to the subscription (StartFrom.Routed) and that is recorded: a reader
	// waits for it before it judges a record that arrived past start.Until.
	extended chan struct{}

	group string     // the subscription's leases
	seed  checkpoint // a checkpoint file's, for leases created here
	// held: the leases owned, by shard, each with its deadline (its last successful
	// renewal's start plus the lease duration, less leaseMargin): written under mu by the
	// follow goroutine (or Close), read by the timers that stop a shard's reader at it.
	held    map[string]time.Time
	timers  map[string]*time.Timer // per lease held: fires at its deadline (follow goroutine)
	written map[string]shardCheck  // the checkpoint last written to each lease held
	obs     observer
}

// shard is the read state of one shard. Guarded by consumer.mu.
type shard struct {
	ctx    context.Context // ends when the consumer closes or the shard's lease is lost
	cancel context.CancelFunc
	lost   bool // its lease was lost: what it settles moves no checkpoint
	// The read state:
	id      string
	pend    []*pending          // records read and not yet in the settled prefix, in order
	skip    map[string]struct{} // from the checkpoint: settled already, not to hand out again
	last    string              // sequence number of the last record read
	drained bool                // the shard is closed and read to its end
	// listedSince: the shards were listed after this one drained (its children found).
	listedSince bool
}

// pending is one record of a shard in read order.
type pending struct {
	seq     string
	settled bool
}

var _ channel.Consumer = (*consumer)(nil)

// newConsumer opens the consumer of the subscription called name; from.Match, if not
// nil, runs its catch-up when its checkpoint has one (with a lease table: leased, and
// seed, if not nil, seeds the leases it creates instead of the checkpoint file), whose
// end moves to when from.Routed is closed if it has not passed or awaits routing.
func newConsumer(c *Channel, name string, from channel.StartFrom, leased *startMark, seed *checkpoint) (*consumer, error) {
	var path string
	var cp checkpoint
	if c.cfg.checkpointDir != "" {
		path = checkpointPath(c.cfg.checkpointDir, c.stream, name)
		var err error
		if cp, err = loadCheckpoint(path, name); err != nil {
			return nil, err
		}
		if !cp.Removed.IsZero() { // re-created without a catch-up (Consume): it is live again
			cp.Removed = time.Time{}
			if err := cp.save(path); err != nil {
				return nil, err
			}
		}
	}
	k := &consumer{ch: c, name: name, path: path, cp: cp,
		ready: make(chan *message, maxUnacked), slots: make(chan struct{}, maxUnacked),
		closed: make(chan struct{}), shards: make(map[string]*shard)}
	k.start = cp.Start
	if c.leases != nil {
		k.start = leased
	}
	if from.Match == nil || k.start == nil {
		k.start = nil
	} else {
		k.match = from.Match
		if from.Routed != nil && (k.start.AwaitsRouting || time.Now().Before(k.start.Until)) {
			k.extended = make(chan struct{})
		}
	}
	if c.leases != nil {
		// The checkpoint file, if any, only seeds leases: the table holds the truth.
		k.seed, k.cp = cp, checkpoint{Subscription: name, Shards: map[string]shardCheck{}}
		if seed != nil {
			k.seed = *seed
		}
		k.group = leaseGroup(c.stream, name)
		k.held, k.timers, k.written = map[string]time.Time{}, map[string]*time.Timer{}, map[string]shardCheck{}
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.wg.Add(1)
	go k.follow()
	if k.extended != nil {
		k.wg.Go(func() { k.extendCatchUp(from.Routed) })
	}
	return k, nil
}

// Receive returns the next message, blocking until one is read, ctx ends or the
// consumer is closed (channel.ErrClosed).
func (k *consumer) Receive(ctx context.Context) (channel.Message, error) {
	return channel.Receive(ctx, k.ready, k.closed)
}

// Len is the number of records routed to the subscription that were read and not
// settled. Records not read yet are not counted: Kinesis tells how far behind a reader
// is in time, not in records.
func (k *consumer) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.unacked
}

// Close stops reading and writes the checkpoint (with a lease table: into each lease
// held, releasing it). Messages not settled are delivered again to the next consumer of
// the subscription.
func (k *consumer) Close() error {
	var err error
	k.once.Do(func() {
		close(k.closed)
		k.cancel()
		k.wg.Wait()
		if k.ch.leases != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = k.writeLeases(ctx, true)
			cancel()
			k.stopTimers()
		} else {
			k.mu.Lock()
			err = k.cp.save(k.path)
			k.mu.Unlock()
		}
		k.ch.forget(k)
	})
	return err
}

// follow starts the readers of the shards that may be read and writes the checkpoint,
// until the consumer closes.
func (k *consumer) follow() {
	defer k.wg.Done()
	if k.ch.leases != nil {
		k.followLeases()
		return
	}
	save := time.NewTicker(k.ch.cfg.checkpointInterval)
	defer save.Stop()
	var lastList time.Time
	for {
		if time.Since(lastList) >= shardRefresh || k.wantsList() {
			if all, err := k.listShards(k.ctx); err != nil {
				k.ch.log.Warn("shards", "kinesis: cannot list shards; retrying", "stream", k.ch.stream, "err", err)
			} else {
				k.startShards(all)
			}
			lastList = time.Now()
		}
		select {
		case <-k.ctx.Done():
			return
		case <-save.C:
		}
		k.mu.Lock()
		if k.dirty {
			if err := k.cp.save(k.path); err != nil {
				k.ch.log.Warn("checkpoint", "kinesis: cannot write checkpoint", "path", k.path, "err", err)
			} else {
				k.dirty = false
			}
		}
		k.mu.Unlock()
	}
}

// wantsList reports whether a shard was read to its end since the shards were last
// listed: its children may start now rather than at the next refresh.
func (k *consumer) wantsList() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.shards {
		if s.drained && !s.listedSince {
			return true
		}
	}
	return false
}

// listShards returns the stream's shards.
func (k *consumer) listShards(ctx context.Context) ([]types.Shard, error) {
	var all []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(k.ch.stream)}
	for {
		out, err := k.ch.api.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		all = append(all, out.Shards...)
		if out.NextToken == nil {
			return all, nil
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// startShards starts a reader for each shard of all that is not read yet, whose parents
// are finished (or gone from the stream: trimmed by retention) and, with a lease table,
// whose lease this replica holds.
func (k *consumer) startShards(all []types.Shard) {
	listed := make(map[string]bool, len(all))
	for _, s := range all {
		listed[aws.ToString(s.ShardId)] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, sh := range k.shards {
		sh.listedSince = sh.drained
	}
	// A parent is finished once read to its end here (its records are all handed out
	// before any of its children's, which is what per-key order needs: the dispatcher
	// keeps it from there), or done in the checkpoint, or trimmed from the stream.
	finished := func(id string) bool {
		sh := k.shards[id]
		return id == "" || !listed[id] || k.cp.Shards[id].Done || sh != nil && sh.drained
	}
	for _, s := range all {
		id := aws.ToString(s.ShardId)
		if _, started := k.shards[id]; started || k.cp.Shards[id].Done {
			continue
		}
		if until, held := k.held[id]; k.ch.leases != nil && (!held || !time.Now().Before(until)) {
			continue // not ours, or past its deadline (the follow goroutine drops it)
		}
		if !finished(aws.ToString(s.ParentShardId)) || !finished(aws.ToString(s.AdjacentParentShardId)) {
			continue // per-key order: a child is read after its parents
		}
		sh := &shard{id: id, skip: map[string]struct{}{}}
		sh.ctx, sh.cancel = context.WithCancel(k.ctx)
		for _, seq := range k.cp.Shards[id].Skip {
			sh.skip[seq] = struct{}{}
		}
		k.shards[id] = sh
		k.wg.Add(1)
		go k.read(sh, k.cp.Shards[id].Seq)
	}
}

// read reads shard sh from after seq (or its oldest record) until it is closed and
// drained, or the consumer closes.
func (k *consumer) read(sh *shard, seq string) {
	defer k.wg.Done()
	defer sh.cancel()
	cfg := k.ch.cfg
	var iter *string
	for iter == nil {
		var err error
		if iter, err = k.iterator(sh.ctx, sh.id, seq); err != nil {
			if sh.ctx.Err() != nil {
				return
			}
			k.ch.log.Warn("iterator", "kinesis: cannot get a shard iterator; retrying", "shard", sh.id, "err", err)
			if !sleep(sh.ctx, cfg.pollInterval) {
				return
			}
		}
	}
	for {
		if !k.roomFor(sh) {
			return
		}
		out, err := k.ch.api.GetRecords(sh.ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1000)})
		if err != nil {
			if sh.ctx.Err() != nil {
				return
			}
			var expired *types.ExpiredIteratorException
			if errors.As(err, &expired) {
				k.mu.Lock()
				from := sh.last
				k.mu.Unlock()
				if from == "" {
					from = seq
				}
				if it, ierr := k.iterator(sh.ctx, sh.id, from); ierr == nil {
					iter = it
				}
				continue
			}
			k.ch.log.Warn("get", "kinesis: GetRecords failed; retrying", "shard", sh.id, "err", err)
			if !sleep(sh.ctx, cfg.pollInterval) {
				return
			}
			continue
		}
		for _, r := range out.Records {
			if !k.add(sh, r) {
				return
			}
		}
		if out.NextShardIterator == nil { // closed by a split or merge, read to its end
			k.mu.Lock()
			sh.drained = true
			k.advance(sh)
			k.mu.Unlock()
			return
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 && !sleep(sh.ctx, cfg.pollInterval) {
			return
		}
	}
}

// iterator returns an iterator of shard id after seq, or at its oldest record.
func (k *consumer) iterator(ctx context.Context, id, seq string) (*string, error) {
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(k.ch.stream), ShardId: aws.String(id),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
	if seq != "" {
		in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
		in.StartingSequenceNumber = aws.String(seq)
	}
	out, err := k.ch.api.GetShardIterator(ctx, in)
	if err != nil {
		return nil, err
	}
	return out.ShardIterator, nil
}

// maxPending bounds the records of a shard read and not yet in its settled prefix
// (mostly records routed elsewhere, queued behind an unsettled one): the reader waits.
const maxPending = 1 << 16

// roomFor waits while sh holds maxPending records; false when the consumer closes.
func (k *consumer) roomFor(sh *shard) bool {
	for {
		k.mu.Lock()
		n := len(sh.pend)
		k.mu.Unlock()
		if n < maxPending {
			return true
		}
		if !sleep(sh.ctx, k.ch.cfg.pollInterval) {
			return false
		}
	}
}

// add takes one record read from sh: routed to the subscription, it is handed out once
// a slot is free; otherwise it is settled at once. False when the consumer closes.
func (k *consumer) add(sh *shard, r types.Record) bool {
	seq := aws.ToString(r.SequenceNumber)
	p := &pending{seq: seq}
	k.mu.Lock()
	sh.last = seq
	_, skipped := sh.skip[seq]
	start := k.start
	k.mu.Unlock()
	var e *event.Event
	if !skipped {
		at := aws.ToTime(r.ApproximateArrivalTimestamp)
		if start != nil && k.extended != nil && !at.Before(start.Until) {
			// Past where the catch-up ends as recorded: it may end later (StartFrom.Routed).
			select {
			case <-k.extended:
			case <-sh.ctx.Done():
				return false
			}
			k.mu.Lock()
			start = k.start
			k.mu.Unlock()
		}
		ev, routes, err := decodeFrame(r.Data)
		if err != nil {
			k.ch.log.Warn("decode", "kinesis: skipping a record that is not a Sluice event", "shard", sh.id, "seq", seq, "err", err)
		}
		routed := slices.Contains(routes, k.name)
		if err == nil && k.catchUp(start, channel.Stored{Event: ev, Time: at, Subscriptions: routes}, routed) {
			e = ev
		}
	}
	if e == nil {
		p.settled = true
		k.mu.Lock()
		sh.pend = append(sh.pend, p)
		k.advance(sh)
		k.mu.Unlock()
		return true
	}
	select {
	case k.slots <- struct{}{}:
	case <-sh.ctx.Done():
		return false
	}
	k.mu.Lock()
	if sh.lost { // its lease ended while this record was read: the new owner reads it
		k.mu.Unlock()
		<-k.slots
		return false
	}
	sh.pend = append(sh.pend, p)
	k.unacked++
	k.mu.Unlock()
	k.ready <- &message{k: k, ev: e, sh: sh, p: p}
	return true
}

// settle ends m: ack settles its record; either way its slot frees.
func (k *consumer) settle(m *message, ack bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m.done {
		return
	}
	m.done = true
	k.unacked--
	<-k.slots
	if ack {
		m.p.settled = true
		k.advance(m.sh)
	}
}

// advance moves sh's checkpoint past its settled prefix and records the settled records
// after it (at most maxSkip), marking the shard done once drained and all settled.
// Called with k.mu held.
func (k *consumer) advance(sh *shard) {
	if sh.lost {
		return
	}
	cp := k.cp.Shards[sh.id]
	i := 0
	for i < len(sh.pend) && sh.pend[i].settled {
		cp.Seq = sh.pend[i].seq
		i++
	}
	if i > 0 {
		clear(sh.pend[:i])
		sh.pend = sh.pend[i:]
	}
	cp.Skip = cp.Skip[:0]
	for _, p := range sh.pend {
		if p.settled && len(cp.Skip) < maxSkip {
			cp.Skip = append(cp.Skip, p.seq)
		}
	}
	if len(cp.Skip) == 0 {
		cp.Skip = nil
	}
	cp.Done = sh.drained && len(sh.pend) == 0
	k.cp.Shards[sh.id] = cp
	k.dirty = true
}

// sleep waits d; false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// message is one record routed to the subscription.
type message struct {
	k    *consumer
	ev   *event.Event
	sh   *shard
	p    *pending
	done bool // guarded by k.mu
}

func (m *message) Event() *event.Event { return m.ev }

// Ack settles the record: the checkpoint moves past it once every earlier record of its
// shard is settled.
func (m *message) Ack() error { m.k.settle(m, true); return nil }

// Release leaves the record unsettled: it holds its shard's checkpoint back and is
// delivered again after a restart.
func (m *message) Release() bool { m.k.settle(m, false); return true }
