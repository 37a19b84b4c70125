package kinesis

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.Starter = (*Channel)(nil)

// startMargin is added to the time a subscription starts in the past to get where its
// catch-up ends: a record's arrival time is the server's clock, and an event published
// just before the trigger existed may be stored a little after. An event of the margin
// that the trigger's filter matches is one it would have been routed anyway.
const startMargin = time.Minute

// startMark is where the catch-up of a subscription started in the past runs, kept in
// its checkpoint: the records that arrived before Until are delivered if routed to it
// or accepted by the trigger's filter, unless they arrived before From.
type startMark struct {
	From  time.Time `json:"from,omitzero"`
	Until time.Time `json:"until"`
	// KeepRouted: the records before From routed to the subscription are delivered too
	// (a subscription re-created after Remove: From is its removal).
	KeepRouted bool `json:"keep_routed,omitempty"`
	// AwaitsRouting: opened with a StartFrom.Routed not closed yet, Until is where the
	// catch-up ends at the latest only once the broker routes to the subscription: then
	// Until moves to that time plus startMargin, recorded before a record past the old one
	// is read (extendCatchUp). A process killed before that waits for its own Routed.
	AwaitsRouting bool `json:"awaits_routing,omitempty"`
}

// ConsumeFrom opens the subscription called name like Consume; if it is new (it has no
// checkpoint) and from is not latest, it reads each shard from its oldest record,
// skipping those that arrived before from.Time, and delivers those that arrived before
// now (with from.Routed: when that is closed) plus startMargin that from.Match accepts,
// as well as those routed to it (channel.Starter). Where the catch-up ends is written
// into its checkpoint before it reads (and again before it reads past that, with
// from.Routed): a process killed mid-way goes on with it after its restart. A
// subscription that has a checkpoint resumes where it stopped, whatever from says.
func (c *Channel) ConsumeFrom(ctx context.Context, name string, from channel.StartFrom) (channel.Consumer, error) {
	if from.Match == nil {
		return c.Consume(ctx, name)
	}
	if c.leases != nil {
		return c.consumeLeasedFrom(ctx, name, from)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	if k := c.consumers[name]; k != nil {
		return k, nil
	}
	path := checkpointPath(c.cfg.checkpointDir, c.stream, name)
	cp, err := loadCheckpoint(path, name)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	isNew := errors.Is(statErr, fs.ErrNotExist)
	now := time.Now()
	switch {
	case !cp.Removed.IsZero() && !from.Latest(), isNew && !from.Latest():
		// New, or re-created with a start of its own: it starts there.
		cp = checkpoint{Subscription: name, Shards: map[string]shardCheck{},
			Start: &startMark{From: from.Time, Until: now.Add(startMargin), AwaitsRouting: from.Routed != nil}}
	case !cp.Removed.IsZero():
		// Re-created: it resumes from its checkpoint, with the records stored while it was
		// gone that its filter accepts (and an unfinished catch-up of its own).
		mark := &startMark{From: cp.Removed.Add(-startMargin), Until: now.Add(startMargin), KeepRouted: true, AwaitsRouting: from.Routed != nil}
		if cp.Start != nil {
			mark.From, mark.KeepRouted = cp.Start.From, cp.Start.KeepRouted
		}
		cp.Start, cp.Removed = mark, time.Time{}
	default: // new at latest, or it exists: it resumes where it stopped
		return c.openLocked(name, from, nil, nil)
	}
	if err := cp.save(path); err != nil {
		return nil, fmt.Errorf("kinesis channel %s: start of subscription %s from %s: %w", c.stream, name, startName(from), err)
	}
	c.cfg.logger.Info("kinesis: subscription catching up with the events stored before it existed",
		"subscription", name, "stream", c.stream, "from", startName(from), "since", cp.Start.From, "until", cp.Start.Until, "awaits_routing", cp.Start.AwaitsRouting)
	return c.openLocked(name, from, nil, nil)
}

func startName(from channel.StartFrom) string {
	if from.Earliest {
		return "earliest"
	}
	return from.Time.UTC().Format(time.RFC3339Nano)
}

// catchUp reports whether a record that arrived at st.Time, routed to it or not, is one
// of the subscription's: routed to it or, in its catch-up s (nil: none), accepted by its
// trigger's filter.
func (k *consumer) catchUp(s *startMark, st channel.Stored, routed bool) bool {
	if s == nil || !st.Time.Before(s.Until) {
		return routed
	}
	if st.Time.Before(s.From) {
		return routed && s.KeepRouted
	}
	return routed || k.match(st)
}

// consumeLeasedFrom is ConsumeFrom with a lease table: the catch-up is an item of the
// table (leasedStart), read or created within startTimeout.
func (c *Channel) consumeLeasedFrom(ctx context.Context, name string, from channel.StartFrom) (channel.Consumer, error) {
	c.mu.Lock()
	k, closed := c.consumers[name], c.closed
	c.mu.Unlock()
	if closed {
		return nil, channel.ErrClosed
	}
	if k != nil {
		return k, nil
	}
	actx, cancel := context.WithTimeout(ctx, startTimeout)
	mark, seed, err := c.leasedStart(actx, name, from)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("kinesis channel %s: start of subscription %s: %w", c.stream, name, channel.Refuse(channel.ErrUnavailable, "the channel's lease table did not answer", err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	if k := c.consumers[name]; k != nil {
		return k, nil
	}
	return c.openLocked(name, from, mark, seed)
}

// maxExtendWait bounds the wait between two attempts to record where a catch-up ends.
const maxExtendWait = 5 * time.Second

// extendCatchUp waits for routed (the broker routes to the subscription), then moves the
// end of its catch-up to that time plus startMargin (never earlier than it was) and
// records it, in the checkpoint file or the lease table, retrying until the consumer
// closes. Only then it closes k.extended: the readers waiting at the old end go on, and
// a process killed before goes on with the new end, or waits for its own routing.
func (k *consumer) extendCatchUp(routed <-chan struct{}) {
	select {
	case <-routed:
	case <-k.ctx.Done():
		return
	}
	until := time.Now().Add(startMargin)
	wait := k.ch.cfg.pollInterval
	for {
		var err error
		if k.ch.leases != nil {
			err = k.extendLeased(until)
		} else {
			err = k.extendFile(until)
		}
		if err == nil {
			break
		}
		if k.ctx.Err() != nil {
			return
		}
		k.ch.log.Warn("catch-up", "kinesis: cannot record where the catch-up ends; retrying", "stream", k.ch.stream, "subscription", k.name, "err", err)
		if !sleep(k.ctx, wait) {
			return
		}
		wait = min(2*wait, maxExtendWait)
	}
	k.mu.Lock()
	s := k.start
	k.mu.Unlock()
	k.ch.cfg.logger.Info("kinesis: subscription routed; its catch-up ends later",
		"subscription", k.name, "stream", k.ch.stream, "until", s.Until)
	close(k.extended)
}

// extendFile moves the end of k's catch-up to until, if later, in its checkpoint file.
func (k *consumer) extendFile(until time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := *k.start
	m.Until, m.AwaitsRouting = later(m.Until, until), false
	cp := k.cp
	cp.Start = &m
	if err := cp.save(k.path); err != nil {
		return err
	}
	k.cp.Start, k.start = &m, &m
	return nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
