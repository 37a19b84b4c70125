package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.Starter = (*Channel)(nil)

const (
	// startTimeout bounds the cluster requests of ConsumeFrom.
	startTimeout = 10 * time.Second
	// routedGrace is how long after the broker routes to a subscription its catch-up goes
	// on taking the records its filter accepts that were not routed to it: those other
	// replicas, which take a configuration change a little later, stored meanwhile.
	routedGrace = time.Minute
)

// catchUp is what a subscription started in the past delivers besides its routed
// records: the records below bound (per partition, the end offsets when it was created,
// then when routed was closed, then while grace lasts) and at or past low (where it was
// removed, for a re-created one whose group never committed; missing: from its
// position) that match accepts. It is not changed once stored in a consumer: moving the
// bound stores a new one.
type catchUp struct {
	bound  map[int32]int64
	low    map[int32]int64
	match  func(channel.Stored) bool
	marker string          // the group whose committed offsets hold bound (and grace) while catching up
	routed <-chan struct{} // StartFrom.Routed until the bound moved past it; nil then, or when none
	// grace, when not zero, is routedGrace after Routed was closed: until then a record
	// past bound that match accepts and that is not routed to the subscription moves the
	// bound to the end offsets first; after it the bound moves once more, for good.
	grace time.Time
	done  atomic.Bool // every partition's commit reached its final bound: the marker is deleted
}

// startGroup is the consumer group whose committed offsets record, while the
// subscription called name catches up, where its catch-up ends.
func (c *Channel) startGroup(name string) string { return c.group(name) + "/start-from" }

// ConsumeFrom opens the subscription called name like Consume; if it is new (its group
// has no committed offset) and from is not latest, it starts at from (the topic's start
// offsets, or the first offsets at or after from.Time) and delivers, below the topic's
// end offsets at this first call, the records from.Match accepts as well as those routed
// to it (channel.Starter). Re-created after Remove, it resumes from its group's commit
// with that catch-up (the events stored while it was gone; from where it was removed
// when its group never committed), unless from is not latest: then it starts at from.
// With from.Routed, the catch-up goes on past those end offsets: once from.Routed is
// closed, its bound moves to the topic's end offsets then (moveBound), and for
// routedGrace after that it moves to the end offsets again before a record past it that
// from.Match accepts and that is not routed to the subscription (another replica, routing
// to it a little later, stored it meanwhile) is judged; once routedGrace has passed, it
// moves to the end offsets a last time. The end offsets (and the grace's end) are
// committed first to a group of their own (<group>/start-from), read back by a later
// call until the catch-up is over (every partition's commit past the last bound; then
// that group is deleted): a process killed while catching up goes on after its restart.
//
// From latest it does not wait for the cluster, as Consume: the consumer looks for a
// catch-up to honour before its first fetch, retrying while the cluster does not answer.
// A start in the past asks the cluster first, within startTimeout.
func (c *Channel) ConsumeFrom(ctx context.Context, name string, from channel.StartFrom) (channel.Consumer, error) {
	if from.Match == nil {
		return c.Consume(ctx, name)
	}
	if from.Latest() {
		return c.open(name, nil, &from)
	}
	c.mu.Lock()
	k := c.consumers[name]
	c.mu.Unlock()
	if k != nil {
		return k, nil
	}
	actx, cancel := context.WithTimeout(ctx, startTimeout)
	cu, err := c.resolveCatchUp(actx, name, from)
	// A coordinator still loading (a cluster just started, a group just moved) answers
	// with a retriable error: asked again, within startTimeout. resolveCatchUp records
	// before it commits, so running it again goes on where it stopped.
	for err != nil && kerr.IsRetriable(err) && actx.Err() == nil {
		select {
		case <-time.After(200 * time.Millisecond):
			cu, err = c.resolveCatchUp(actx, name, from)
		case <-actx.Done():
		}
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("kafka channel %s: start of subscription %s from %s: %w", c.topic, name, startName(from), channel.Refuse(channel.ErrUnavailable, "the channel's Kafka cluster did not answer", err))
	}
	return c.open(name, cu, nil)
}

// open returns the open consumer of the subscription called name, or opens it with the
// catch-up cu, or with latest to resolve its catch-up before its first fetch.
func (c *Channel) open(name string, cu *catchUp, latest *channel.StartFrom) (channel.Consumer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	if k := c.consumers[name]; k != nil {
		return k, nil
	}
	k, err := newConsumer(c, name, cu, latest)
	if err != nil {
		return nil, err
	}
	c.consumers[name] = k
	return k, nil
}

// resolveCatchUp asks the cluster for the catch-up of the subscription called name
// started at from: nil when it has none.
func (c *Channel) resolveCatchUp(ctx context.Context, name string, from channel.StartFrom) (*catchUp, error) {
	if err := c.ensureTopic(ctx); err != nil {
		return nil, err
	}
	bound, low, grace, err := c.catchUpBound(ctx, name, from)
	if err != nil || len(bound) == 0 {
		return nil, err
	}
	c.cfg.logger.Info("kafka: subscription catching up with the events stored before it existed",
		"subscription", name, "group", c.group(name), "from", startName(from), "until_offsets", bound, "from_offsets", low)
	return &catchUp{bound: bound, low: low, match: from.Match, marker: c.startGroup(name), routed: from.Routed, grace: grace}, nil
}

// resolveLatest sets the consumer's catch-up when it was opened from latest: called by
// poll before its first fetch, it retries until the cluster answers or the consumer
// closes (reporting false).
func (k *consumer) resolveLatest(from channel.StartFrom) bool {
	for k.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(k.ctx, startTimeout)
		cu, err := k.ch.resolveCatchUp(ctx, k.name, from)
		cancel()
		if err == nil {
			k.catch.Store(cu)
			return true
		}
		if k.ctx.Err() == nil {
			k.ch.log.Warn("catchup", "kafka: cannot tell whether the subscription was removed before and must catch up; retrying before its first fetch",
				"subscription", k.name, "group", k.group, "err", err)
		}
		k.sleep(time.Second)
	}
	return false
}

func startName(from channel.StartFrom) string {
	if from.Earliest {
		return "earliest"
	}
	return from.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// committed returns the offsets group committed on the topic.
func (c *Channel) committed(ctx context.Context, group string) (map[int32]int64, error) {
	rs, err := c.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p, o := range rs[c.topic] {
		if o.Err == nil && o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// catchUpBound returns where the subscription's catch-up ends, per partition, or nil
// when it has none, where it begins when not at the group's position, and the end of its
// grace after routing when one was recorded (zero: none). A
// subscription whose group committed before resumes without one; one re-created after
// Remove (its removed marker is there) resumes from its commit with a catch-up up to the
// end offsets now (from the end offsets at its removal, recorded in its marker, when its
// group never committed), or starts at from when from is not latest; a new one starts at
// from, or as Consume when from is latest. A catch-up's bounds are recorded before the
// group's start offsets are committed, so that a crash in between is resumed by the next
// call.
func (c *Channel) catchUpBound(ctx context.Context, name string, from channel.StartFrom) (bound, low map[int32]int64, grace time.Time, err error) {
	marker, removed, group := c.startGroup(name), c.removedGroup(name), c.group(name)
	bound, low, grace, err = c.committedMeta(ctx, marker)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	gone, err := c.committed(ctx, removed)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	have, err := c.committed(ctx, group)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	recreated := len(gone) > 0
	switch {
	case len(bound) > 0: // a catch-up under way
	case len(have) > 0 && !recreated:
		return nil, nil, time.Time{}, nil // it exists: it resumes where it stopped
	case !recreated && from.Latest():
		return nil, nil, time.Time{}, nil // new: as Consume
	default:
		ends, err := c.adm.ListEndOffsets(ctx, c.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("listing end offsets: %w", err)
		}
		bound = map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) { bound[o.Partition] = o.Offset })
		if recreated && len(have) == 0 && from.Latest() {
			// It never committed: what it had were the records routed to it (its group
			// reads them from the start); what it missed, those stored since its removal.
			low = gone
		}
		if err := c.commitMarker(ctx, marker, bound, low, time.Time{}); err != nil {
			return nil, nil, time.Time{}, err
		}
	}
	if !from.Latest() && (len(have) == 0 || recreated) {
		var starts kadm.ListedOffsets
		if from.Earliest {
			starts, err = c.adm.ListStartOffsets(ctx, c.topic)
		} else {
			starts, err = c.adm.ListOffsetsAfterMilli(ctx, from.Time.UnixMilli(), c.topic)
		}
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("listing start offsets: %w", err)
		}
		at := map[int32]int64{}
		starts.Each(func(o kadm.ListedOffset) { at[o.Partition] = o.Offset })
		if err := c.commitOffsets(ctx, group, at); err != nil {
			return nil, nil, time.Time{}, err
		}
	}
	if recreated {
		if err := c.deleteGroup(ctx, removed); err != nil {
			return nil, nil, time.Time{}, err
		}
	}
	return bound, low, grace, nil
}

// lowMeta prefixes the field of a catch-up marker offset's metadata that records where
// the catch-up begins on that partition; graceMeta the field that records the end of its
// grace after routing (milliseconds since the Unix epoch). Fields are separated by a space.
const (
	lowMeta   = "low="
	graceMeta = "grace="
)

// markerMeta returns the metadata of a catch-up marker's offset: low (when has) and grace
// (when not zero).
func markerMeta(low int64, has bool, grace time.Time) string {
	var fs []string
	if has {
		fs = append(fs, lowMeta+strconv.FormatInt(low, 10))
	}
	if !grace.IsZero() {
		fs = append(fs, graceMeta+strconv.FormatInt(grace.UnixMilli(), 10))
	}
	return strings.Join(fs, " ")
}

// parseMarkerMeta reads markerMeta's fields; fields it does not know or cannot read are
// ignored (as if not recorded).
func parseMarkerMeta(meta string) (low int64, has bool, grace time.Time) {
	for _, f := range strings.Fields(meta) {
		if v, ok := strings.CutPrefix(f, lowMeta); ok {
			if at, err := strconv.ParseInt(v, 10, 64); err == nil {
				low, has = at, true
			}
		} else if v, ok := strings.CutPrefix(f, graceMeta); ok {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
				grace = time.UnixMilli(ms)
			}
		}
	}
	return low, has, grace
}

// commitMarker commits a catch-up's bounds to its marker group: bound as the offsets,
// low (if any) and grace (if not zero) in their metadata.
func (c *Channel) commitMarker(ctx context.Context, marker string, bound, low map[int32]int64, grace time.Time) error {
	meta := map[int32]string{}
	for p := range bound {
		at, has := low[p]
		meta[p] = markerMeta(at, has, grace)
	}
	return c.commitOffsetsMeta(ctx, marker, bound, meta)
}

// committedMeta returns a catch-up marker's bounds and grace (commitMarker); low is nil
// and grace zero when none was recorded.
func (c *Channel) committedMeta(ctx context.Context, marker string) (bound, low map[int32]int64, grace time.Time, err error) {
	rs, err := c.adm.FetchOffsets(ctx, marker)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil, time.Time{}, nil
	}
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("reading the offsets of group %s: %w", marker, err)
	}
	for p, o := range rs[c.topic] {
		if o.Err != nil || o.At < 0 {
			continue
		}
		if bound == nil {
			bound = map[int32]int64{}
		}
		bound[p] = o.At
		at, has, g := parseMarkerMeta(o.Metadata)
		if has {
			if low == nil {
				low = map[int32]int64{}
			}
			low[p] = at
		}
		if g.After(grace) {
			grace = g
		}
	}
	return bound, low, grace, nil
}

// removedGroup is the consumer group whose existence says that the subscription called
// name was removed (Remove) with its group kept: opened again, it catches up.
func (c *Channel) removedGroup(name string) string { return c.group(name) + "/removed" }

// markRemoved records that the subscription called name was removed: its group stays,
// so that a trigger re-created with its name resumes where it stopped. The marker's
// offsets are the topic's end offsets now: a re-created one whose group never committed
// catches up from there. A catch-up under way is dropped: the re-created one catches up
// from its commit.
func (c *Channel) markRemoved(ctx context.Context, name string) error {
	ends, err := c.adm.ListEndOffsets(ctx, c.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("listing end offsets: %w", err)
	}
	at := map[int32]int64{0: 0} // a group needs an offset to exist
	ends.Each(func(o kadm.ListedOffset) { at[o.Partition] = o.Offset })
	if err := c.commitOffsets(ctx, c.removedGroup(name), at); err != nil {
		return err
	}
	return c.deleteGroup(ctx, c.startGroup(name))
}

// deleteGroup deletes group; one that does not exist is no error.
func (c *Channel) deleteGroup(ctx context.Context, group string) error {
	if _, err := c.adm.DeleteGroup(ctx, group); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("deleting group %s: %w", group, err)
	}
	return nil
}

// commitOffsets commits offs on the topic for group, a group without members.
func (c *Channel) commitOffsets(ctx context.Context, group string, offs map[int32]int64) error {
	return c.commitOffsetsMeta(ctx, group, offs, nil)
}

// commitOffsetsMeta commits offs on the topic, with meta's metadata, for group, a group
// without members.
func (c *Channel) commitOffsetsMeta(ctx context.Context, group string, offs map[int32]int64, meta map[int32]string) error {
	os := kadm.Offsets{}
	for p, at := range offs {
		os.Add(kadm.Offset{Topic: c.topic, Partition: p, At: at, LeaderEpoch: -1, Metadata: meta[p]})
	}
	rs, err := c.adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		return fmt.Errorf("committing the offsets of group %s: %w", group, err)
	}
	return nil
}

// catches reports whether r, not routed to the subscription, is one of its catch-up's.
// Called with k.mu held.
func (k *consumer) catches(r *kgo.Record) bool {
	cu := k.catch.Load()
	if cu == nil || cu.done.Load() {
		return false
	}
	if b, ok := cu.bound[r.Partition]; !ok || r.Offset >= b {
		return false
	}
	if l, ok := cu.low[r.Partition]; ok && r.Offset < l {
		return false
	}
	return cu.match(channel.Stored{Event: decodeRecord(r), Time: r.Timestamp, Subscriptions: routes(r)})
}

// checkCaughtUp deletes the catch-up's marker group once the subscription's group has
// committed, on every partition, at least its final bound: moved past its Routed channel
// and then once more after its grace.
func (k *consumer) checkCaughtUp(ctx context.Context) {
	cu := k.catch.Load()
	if cu == nil || cu.done.Load() {
		return
	}
	if cu.routed != nil || !cu.grace.IsZero() {
		if cu.routed == nil && time.Now().Before(cu.grace) {
			return // in the grace: the bound moves on
		}
		if !k.moveBound(ctx, false) {
			return // not routed yet: what is stored until then is caught up too
		}
		if cu = k.catch.Load(); cu.routed != nil || !cu.grace.IsZero() {
			return // routed just now: the grace begins
		}
	}
	have, err := k.ch.committed(ctx, k.group)
	if err != nil {
		return
	}
	for p, b := range cu.bound {
		if have[p] < b {
			return
		}
	}
	if _, err := k.ch.adm.DeleteGroup(ctx, cu.marker); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		k.ch.log.Warn("catchup", "kafka: cannot delete the catch-up marker group; retrying", "group", cu.marker, "err", err)
		return
	}
	cu.done.Store(true)
	k.ch.cfg.logger.Info("kafka: subscription caught up with the events stored before it existed", "subscription", k.name, "group", k.group)
}

// pastBound reports whether fs holds a record at or past the bound of a catch-up whose
// bound is still to move (its Routed channel is to be waited for, or it is in its grace)
// that the catch-up's match accepts and that is not routed to the subscription: it
// cannot be judged before the bound moves. Records routed to the subscription are
// delivered, and those match refuses skipped, wherever the bound is.
func (k *consumer) pastBound(fs kgo.Fetches) bool {
	cu := k.catch.Load()
	if cu == nil || cu.done.Load() || cu.routed == nil && cu.grace.IsZero() {
		return false
	}
	past := false
	fs.EachRecord(func(r *kgo.Record) {
		if past || routedTo(r, k.name) {
			return
		}
		if b, ok := cu.bound[r.Partition]; (!ok || r.Offset >= b) && cu.match(channel.Stored{Event: decodeRecord(r), Time: r.Timestamp, Subscriptions: routes(r)}) {
			past = true
		}
	})
	return past
}

// moveBound moves the bound of the consumer's catch-up to the topic's end offsets: once
// its Routed channel is closed (the broker's routing names the subscription), beginning
// its grace (routedGrace from now); in its grace; and once after its grace, ending it
// (that bound is final). The records stored between the open and the routing, and those
// other replicas stored in the grace, are caught up too. The new bound and grace are
// committed to the marker group before they are used, so that a restart goes on with
// them. With wait it waits for Routed until ctx ends; without, it returns at once while
// Routed is open. It reports false when it did not move (Routed open, or the cluster
// failed), true when it moved or has nothing to move.
func (k *consumer) moveBound(ctx context.Context, wait bool) bool {
	cu := k.catch.Load()
	if cu == nil || cu.routed == nil && cu.grace.IsZero() {
		return true
	}
	if cu.routed != nil {
		if wait {
			select {
			case <-cu.routed:
			case <-ctx.Done():
				return false
			}
		} else {
			select {
			case <-cu.routed:
			default:
				return false
			}
		}
	}
	k.boundMu.Lock()
	defer k.boundMu.Unlock()
	if k.catch.Load() != cu {
		return true // moved meanwhile
	}
	now := time.Now()
	grace := cu.grace
	switch {
	case cu.routed != nil:
		grace = now.Add(routedGrace)
	case !now.Before(grace):
		grace = time.Time{} // past the grace: this bound is final
	}
	ends, err := k.ch.adm.ListEndOffsets(ctx, k.ch.topic)
	if err == nil {
		err = ends.Error()
	}
	if err == nil {
		bound := maps.Clone(cu.bound)
		ends.Each(func(o kadm.ListedOffset) { bound[o.Partition] = max(bound[o.Partition], o.Offset) })
		if err = k.ch.commitMarker(ctx, cu.marker, bound, cu.low, grace); err == nil {
			k.catch.Store(&catchUp{bound: bound, low: cu.low, match: cu.match, marker: cu.marker, grace: grace})
			switch {
			case cu.routed != nil:
				k.ch.cfg.logger.Info("kafka: subscription routed: its catch-up goes on up to the end offsets now, and for a grace after",
					"subscription", k.name, "group", k.group, "until_offsets", bound, "grace_until", grace)
			case grace.IsZero():
				k.ch.cfg.logger.Info("kafka: subscription's grace after routing over: its catch-up ends at the end offsets now",
					"subscription", k.name, "group", k.group, "until_offsets", bound)
			}
			return true
		}
	}
	if ctx.Err() == nil {
		k.ch.log.Warn("catchup", "kafka: cannot move the catch-up's bound to the end offsets; retrying",
			"subscription", k.name, "group", k.group, "err", err)
	}
	return false
}
