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
}

// ConsumeFrom opens the subscription called name like Consume; if it is new (it has no
// checkpoint) and from is not latest, it reads each shard from its oldest record,
// skipping those that arrived before from.Time, and delivers those that arrived before
// now (plus startMargin) that from.Match accepts as well as those routed to it
// (channel.Starter). Where the catch-up ends is written into its checkpoint before it
// reads: a process killed mid-way goes on with it after its restart. A subscription that
// has a checkpoint resumes where it stopped, whatever from says. With a lease table a
// start other than latest is refused.
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
			Start: &startMark{From: from.Time, Until: now.Add(startMargin)}}
	case !cp.Removed.IsZero():
		// Re-created: it resumes from its checkpoint, with the records stored while it was
		// gone that its filter accepts (and an unfinished catch-up of its own).
		mark := &startMark{From: cp.Removed.Add(-startMargin), Until: now.Add(startMargin), KeepRouted: true}
		if cp.Start != nil {
			mark.From, mark.KeepRouted = cp.Start.From, cp.Start.KeepRouted
		}
		cp.Start, cp.Removed = mark, time.Time{}
	default: // new at latest, or it exists: it resumes where it stopped
		return c.openLocked(name, from.Match, nil, nil)
	}
	if err := cp.save(path); err != nil {
		return nil, fmt.Errorf("kinesis channel %s: start of subscription %s from %s: %w", c.stream, name, startName(from), err)
	}
	c.cfg.logger.Info("kinesis: subscription catching up with the events stored before it existed",
		"subscription", name, "stream", c.stream, "from", startName(from), "since", cp.Start.From, "until", cp.Start.Until)
	return c.openLocked(name, from.Match, nil, nil)
}

func startName(from channel.StartFrom) string {
	if from.Earliest {
		return "earliest"
	}
	return from.Time.UTC().Format(time.RFC3339Nano)
}

// catchUp reports whether a record that arrived at at, routed to routes, is one of the
// subscription's: routed to it or, in its catch-up, accepted by its trigger's filter.
func (k *consumer) catchUp(st channel.Stored, routed bool) bool {
	s := k.start
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
	return c.openLocked(name, from.Match, mark, seed)
}
