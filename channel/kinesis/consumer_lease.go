package kinesis

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// followLeases is follow with a lease table: a lease round every third of the lease
// duration (and at once when a shard was read to its end), the checkpoints of the leases
// held written every checkpoint interval, until the consumer closes.
func (k *consumer) followLeases() {
	d := k.ch.leases.duration
	round := time.NewTicker(d / 3)
	defer round.Stop()
	save := time.NewTicker(k.ch.cfg.checkpointInterval)
	defer save.Stop()
	k.leaseRound()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-round.C:
			k.leaseRound()
		case <-save.C:
			ctx, cancel := context.WithTimeout(k.ctx, k.callLimit())
			err := k.writeLeases(ctx, false)
			cancel()
			if err != nil && k.ctx.Err() == nil {
				k.ch.log.Warn("checkpoint", "kinesis: cannot write checkpoints to the lease table", "table", k.ch.leases.name, "err", err)
			}
			if k.wantsList() {
				k.leaseRound()
			}
		}
	}
}

// leaseMargin is how long before a lease could expire, as other replicas see it, its
// owner stops reading the shard: a lease's deadline is the start of its last successful
// renewal (or take) plus the lease duration, less this margin. Another replica can take
// the lease only once it has seen the counter that renewal wrote unchanged for the lease
// duration, which starts after the renewal started: the old owner stops first.
func leaseMargin(d time.Duration) time.Duration { return d / 10 }

// callLimit bounds the lease table calls of a round or a checkpoint write: the lease
// duration, or less when a lease's deadline comes sooner, so that a DynamoDB that hangs
// does not delay the next renewals past a deadline.
func (k *consumer) callLimit() time.Duration {
	limit := k.ch.leases.duration
	now := time.Now()
	for _, until := range k.held {
		limit = min(limit, until.Sub(now))
	}
	return max(limit, time.Millisecond)
}

// hold records that this replica owns the lease of shard id until the deadline of a
// renewal (or take) that started at start, and arms the timer that stops the shard's
// reader at that deadline, on its own goroutine: however long the follow goroutine waits
// on DynamoDB, the reader stops in time.
func (k *consumer) hold(id string, start time.Time) {
	until := start.Add(k.ch.leases.duration - leaseMargin(k.ch.leases.duration))
	k.mu.Lock()
	k.held[id] = until
	k.mu.Unlock()
	wait := time.Until(until)
	if tm := k.timers[id]; tm != nil {
		tm.Reset(wait)
		return
	}
	k.timers[id] = time.AfterFunc(wait, func() { k.expire(id) })
}

// unhold forgets the lease of shard id (dropped or released) and disarms its timer.
func (k *consumer) unhold(id string) {
	k.mu.Lock()
	delete(k.held, id)
	k.mu.Unlock()
	delete(k.written, id)
	if tm := k.timers[id]; tm != nil {
		tm.Stop()
		delete(k.timers, id)
	}
}

// stopTimers disarms every lease timer; called by Close.
func (k *consumer) stopTimers() {
	for id, tm := range k.timers {
		tm.Stop()
		delete(k.timers, id)
	}
}

// expire, run by a lease's timer, stops the reader of shard id if its lease's deadline
// has passed without a renewal: another replica may take the lease from then on. The
// follow goroutine drops the lease at its next round, or reads the shard again if a
// renewal that was under way succeeds.
func (k *consumer) expire(id string) {
	k.mu.Lock()
	until, held := k.held[id]
	sh := k.shards[id]
	stop := held && !time.Now().Before(until) && sh != nil
	if stop {
		sh.lost = true
		sh.cancel()
		delete(k.shards, id)
	}
	k.mu.Unlock()
	if stop {
		k.ch.log.Warn("lease-expired", "kinesis: lease not renewed within its duration; stop reading the shard", "stream", k.ch.stream, "subscription", k.name, "shard", id)
	}
}

// leaseRound is one round of a consumer with a lease table, run by the follow goroutine
// every third of the lease duration: drop the leases past their deadline, renew the
// others, create the leases of new shards, take free, expired or (to balance) stolen
// ones, and start reading the shards held.
func (k *consumer) leaseRound() {
	t := k.ch.leases
	for id, until := range k.held {
		if !time.Now().Before(until) {
			k.expire(id) // in case its timer has not run yet
			k.drop(id)   // taken again from the table when still ours
		}
	}
	// A round that hangs (DynamoDB unreachable) ends at the first deadline of the leases
	// held, or with the lease duration.
	ctx, cancel := context.WithTimeout(k.ctx, k.callLimit())
	defer cancel()
	for id := range k.held {
		start := time.Now()
		err := t.renew(ctx, k.group, id)
		switch {
		case err == nil:
			k.hold(id, start)
		case errors.Is(err, errLeaseLost):
			k.ch.cfg.logger.Info("kinesis: lease taken by another replica; stop reading the shard", "stream", k.ch.stream, "subscription", k.name, "shard", id)
			k.drop(id)
		case k.ctx.Err() == nil:
			k.ch.log.Warn("lease", "kinesis: cannot renew a lease; retrying until its deadline", "shard", id, "err", err)
		}
	}
	all, err := k.listShards(ctx)
	if err != nil {
		if k.ctx.Err() == nil {
			k.ch.log.Warn("shards", "kinesis: cannot list shards; retrying", "stream", k.ch.stream, "err", err)
		}
		return
	}
	ls, err := k.leaseList(ctx, all)
	if err != nil {
		if k.ctx.Err() == nil {
			k.ch.log.Warn("lease", "kinesis: cannot read the lease table; retrying", "table", t.name, "err", err)
		}
		k.startShards(all)
		return
	}
	// Seen once read: a counter is never taken as seen before the write that set it.
	now := time.Now()
	k.obs.observe(ls, now)
	var open, take []lease
	k.mu.Lock()
	for _, l := range ls {
		if _, held := k.held[l.shard]; !held {
			k.cp.Shards[l.shard] = l.check // another's, or free: for finished parents
			if l.owner == t.owner && !l.check.Done {
				take = append(take, l) // ours in the table, not here (a renewal was lost)
			}
		}
		if !l.check.Done {
			open = append(open, l)
		}
	}
	k.mu.Unlock()
	take = append(take, plan(t.owner, open, func(l lease) bool { return k.obs.expired(l, now, t.duration) })...)
	for _, l := range take {
		start := time.Now()
		got, err := t.take(ctx, k.group, l)
		if errors.Is(err, errLeaseLost) {
			continue // another replica was first
		}
		if err != nil {
			if k.ctx.Err() == nil {
				k.ch.log.Warn("lease", "kinesis: cannot take a lease", "shard", l.shard, "err", err)
			}
			continue
		}
		k.ch.cfg.logger.Info("kinesis: lease taken", "stream", k.ch.stream, "subscription", k.name, "shard", l.shard, "from", l.owner, "seq", got.check.Seq)
		k.mu.Lock()
		k.cp.Shards[l.shard] = got.check
		k.mu.Unlock()
		k.hold(l.shard, start)
		k.written[l.shard] = got.check
	}
	k.startShards(all)
}

// leaseList returns the leases of the subscription for the shards in all, creating the
// missing ones (from the seed checkpoint) and deleting those of shards gone from the
// stream (trimmed) that no one holds.
func (k *consumer) leaseList(ctx context.Context, all []types.Shard) ([]lease, error) {
	t := k.ch.leases
	ls, err := t.list(ctx, k.group)
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(ls))
	for _, l := range ls {
		have[l.shard] = true
	}
	listed := make(map[string]bool, len(all))
	created := false
	for _, s := range all {
		id := aws.ToString(s.ShardId)
		listed[id] = true
		if !have[id] {
			if err := t.create(ctx, k.group, id, k.seed.Shards[id]); err != nil {
				return nil, err
			}
			created = true
		}
	}
	if created {
		if ls, err = t.list(ctx, k.group); err != nil {
			return nil, err
		}
	}
	kept := ls[:0]
	for _, l := range ls {
		if listed[l.shard] {
			kept = append(kept, l)
			continue
		}
		if l.owner == "" {
			if err := t.remove(ctx, k.group, l.shard); err != nil {
				return nil, err
			}
		}
	}
	return kept, nil
}

// writeLeases writes the checkpoint of each lease held that changed since last written;
// with release, or for a finished shard, it gives the lease up. A lease found lost is
// dropped.
func (k *consumer) writeLeases(ctx context.Context, release bool) error {
	type write struct {
		id    string
		check shardCheck
	}
	var todo []write
	k.mu.Lock()
	for id := range k.held {
		c := k.cp.Shards[id]
		w := k.written[id]
		if release || c.Done || c.Seq != w.Seq || !slices.Equal(c.Skip, w.Skip) {
			c.Skip = slices.Clone(c.Skip) // advance reuses the slice
			todo = append(todo, write{id, c})
		}
	}
	k.mu.Unlock()
	var errs []error
	for _, w := range todo {
		rel := release || w.check.Done
		err := k.ch.leases.checkpoint(ctx, k.group, w.id, w.check, rel)
		switch {
		case errors.Is(err, errLeaseLost):
			k.ch.cfg.logger.Info("kinesis: lease taken by another replica; stop reading the shard", "stream", k.ch.stream, "subscription", k.name, "shard", w.id)
			k.drop(w.id)
		case err != nil:
			errs = append(errs, err)
		case rel:
			k.unhold(w.id)
		default:
			k.written[w.id] = w.check
		}
	}
	return errors.Join(errs...)
}

// drop stops reading shard id, whose lease is no longer held. Its messages in flight
// settle without moving a checkpoint; the new owner delivers them again.
func (k *consumer) drop(id string) {
	k.unhold(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	if sh := k.shards[id]; sh != nil {
		sh.lost = true
		sh.cancel()
		delete(k.shards, id)
	}
	delete(k.cp.Shards, id)
}
