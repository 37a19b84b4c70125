package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

var _ channel.Starter = (*Channel)(nil)

// A subscription started in the past catches up by copying, from the archive, the events
// stored before it existed that its filter accepts into its own subject of the work-queue
// stream, where its durable consumer delivers them like those routed to it. Where the
// copy is is kept in the durable consumer's metadata, so a process killed while copying
// (or another replica) goes on with it.
const (
	metaCatchUpFrom  = "sluice.catchup.from"  // "earliest" or an RFC 3339 time
	metaCatchUpNext  = "sluice.catchup.next"  // the archive sequence to copy next; 0: from the start
	metaCatchUpBound = "sluice.catchup.bound" // the archive's last sequence when the subscription was created
	metaCatchUpID    = "sluice.catchup.id"    // names this catch-up's copies for the duplicate window
	metaCatchUpOwn   = "sluice.catchup.own"   // up to this archive sequence, events routed to the subscription's name are copied too
	metaRemovedSeq   = "sluice.removed.seq"   // the archive's last sequence when the subscription was removed
	metaRemovedAt    = "sluice.removed.at"    // when, RFC 3339
	// catchUpRetryMax is the longest a copy waits before trying a failed page again (a full
	// stream, the server unreachable).
	catchUpRetryMax = 5 * time.Second
	// routedGrace is how long after the broker routes to a subscription its copy goes on
	// taking the events its filter accepts that were not routed to it: those other
	// replicas, which take a configuration change a little later, stored meanwhile.
	// routedStep is how often the copy moves its bound during that time.
	routedGrace = time.Minute
	routedStep  = 5 * time.Second
)

// ConsumeFrom opens the subscription called name like Consume (channel.Starter). If its
// durable consumer does not exist yet (or was removed and from is not latest: then it is
// deleted first) and from is not latest, it first starts copying, in the background, the
// archived events (WithRetention) stored from from up to now (with from.Routed, up to when
// that is closed) that from.Match accepts into the subscription's subject. They are delivered beside the events routed to it from now
// on, each once (a page copied again after a crash is dropped by the stream's duplicate
// window), not strictly before them. A subscription that exists resumes where it stopped,
// going on with a copy under way; one whose consumer Remove kept, opened at latest,
// resumes too: it gets what it had not settled, and a copy of the archived events stored
// while it was gone that from.Match accepts. Starting in the past needs an archive:
// without one it returns an error wrapping channel.ErrNotKept.
func (c *Channel) ConsumeFrom(ctx context.Context, name string, from channel.StartFrom) (channel.Consumer, error) {
	if from.Match == nil {
		return c.Consume(ctx, name)
	}
	if c.closed.Load() {
		return nil, channel.ErrClosed
	}
	fail := func(err error) error {
		return fmt.Errorf("jetstream: start of subscription %q of broker %q: %w", name, c.brokerKey, unavailable(err))
	}
	jc, err := c.js.Consumer(ctx, c.stream, c.durable(name))
	if c.archive == "" && err == nil {
		// No archive (any more): nothing to catch up with. Consume drops the marks of a
		// copy or a removal made while the broker had one; the events kept stay.
		if _, removed := jc.CachedInfo().Config.Metadata[metaRemovedSeq]; !removed || from.Latest() {
			return c.Consume(ctx, name)
		}
		err = jetstream.ErrConsumerNotFound // removed, and restarted at from: refused below
	}
	if err == nil {
		if _, removed := jc.CachedInfo().Config.Metadata[metaRemovedSeq]; removed {
			if jc, err = c.recreated(ctx, name, jc, from); err != nil {
				return nil, fail(err)
			}
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound) || err == nil && jc == nil:
		if from.Latest() {
			return c.Consume(ctx, name)
		}
		if c.archive == "" {
			return nil, fmt.Errorf("jetstream: start of subscription %q of broker %q from %s: %w: starting in the past reads the archive kept under sluice.dev/retention, and the broker has none",
				name, c.brokerKey, startName(from), channel.ErrNotKept)
		}
		last, err := c.archiveLast(ctx)
		if err != nil {
			return nil, fail(err)
		}
		cfg := c.consumerConfig(name)
		cfg.Metadata[metaCatchUpID] = catchUpID()
		cfg.Metadata[metaCatchUpFrom] = startName(from)
		cfg.Metadata[metaCatchUpNext] = "0"
		cfg.Metadata[metaCatchUpBound] = strconv.FormatUint(last, 10)
		// Events routed to the name before the consumer existed were a removed
		// subscription's, deleted with it: this one's own, filter or not.
		cfg.Metadata[metaCatchUpOwn] = strconv.FormatUint(last, 10)
		if jc, err = c.js.CreateConsumer(ctx, c.stream, cfg); err != nil {
			if !errors.Is(err, jetstream.ErrConsumerExists) {
				return nil, fail(err)
			}
			// Another replica created it meanwhile: take its.
			if jc, err = c.js.Consumer(ctx, c.stream, c.durable(name)); err != nil {
				return nil, fail(err)
			}
		}
	case err != nil:
		return nil, fail(err)
	}
	md := jc.CachedInfo().Config.Metadata
	if _, ok := md[metaCatchUpBound]; !ok {
		return c.Consume(ctx, name) // it exists and has caught up (or never had to)
	}
	cu, err := parseCatchUp(md)
	if err != nil {
		return nil, fail(err)
	}
	jcons, err := c.open(name, jc)
	if err != nil {
		return nil, err
	}
	c.log.Info("jetstream: subscription catching up with the events stored before it existed",
		"subscription", name, "from", md[metaCatchUpFrom], "next_archive_seq", cu.next, "until_archive_seq", cu.bound)
	jcons.wg.Go(func() { c.catchUp(jcons.ctx, name, cu, from) })
	return jcons, nil
}

// catchUpState is where a subscription's copy is.
type catchUpState struct {
	id    string // unique to the catch-up: a copy made again is a duplicate, a later catch-up's is not
	from  string // "earliest" or an RFC 3339 time
	next  uint64 // archive sequence; 0: from from
	bound uint64 // last archive sequence to copy
	own   uint64 // up to it, events routed to the subscription are copied without the filter
}

// parseCatchUp reads the copy's state from a durable consumer's metadata.
func parseCatchUp(md map[string]string) (catchUpState, error) {
	cu := catchUpState{id: md[metaCatchUpID], from: md[metaCatchUpFrom]}
	var err error
	if cu.next, err = strconv.ParseUint(md[metaCatchUpNext], 10, 64); err != nil {
		return cu, fmt.Errorf("consumer metadata %s: %w", metaCatchUpNext, err)
	}
	if cu.bound, err = strconv.ParseUint(md[metaCatchUpBound], 10, 64); err != nil {
		return cu, fmt.Errorf("consumer metadata %s: %w", metaCatchUpBound, err)
	}
	if v, ok := md[metaCatchUpOwn]; ok {
		if cu.own, err = strconv.ParseUint(v, 10, 64); err != nil {
			return cu, fmt.Errorf("consumer metadata %s: %w", metaCatchUpOwn, err)
		}
	}
	if cu.from != "earliest" {
		if _, err := time.Parse(time.RFC3339Nano, cu.from); err != nil {
			return cu, fmt.Errorf("consumer metadata %s: %w", metaCatchUpFrom, err)
		}
	}
	return cu, nil
}

func startName(from channel.StartFrom) string {
	if from.Earliest {
		return "earliest"
	}
	return from.Time.UTC().Format(time.RFC3339Nano)
}

// catchUp copies the archive's messages from cu's position up to its bound that
// from.Match accepts (and were not routed to name already) into name's subject, a page at
// a time, recording after each page where it is. Once at the bound it waits for
// from.Routed (if set) and moves the bound to the archive's end then, and every
// routedStep until routedGrace has passed: what was stored between the open and the
// routing is copied too, and what other replicas, routing to it a little later, stored
// meanwhile. Then it removes the copy's state.
// Failures are retried with a backoff until ctx ends (the consumer closed): a later open
// goes on.
func (c *Channel) catchUp(ctx context.Context, name string, cu catchUpState, from channel.StartFrom) {
	wait := minFetchBackoff
	routed := from.Routed
	var graceEnd, nextStep time.Time // set once routed; zero again once the grace has passed
	var oc jetstream.Consumer
	for ctx.Err() == nil {
		var err error
		done := cu.bound == 0 || cu.next > cu.bound
		if !done && oc == nil {
			oc, err = c.archiveFrom(ctx, cu)
		}
		if !done && err == nil {
			done, err = c.copyPage(ctx, name, oc, &cu, from.Match)
		}
		if err != nil {
			oc = nil // start again from cu.next
		}
		if err == nil && done && routed != nil {
			select {
			case <-routed:
				routed, graceEnd = nil, time.Now().Add(routedGrace)
			case <-ctx.Done():
				return
			}
		}
		if err == nil && done && routed == nil && !graceEnd.IsZero() {
			// Routed: the bound moves to the archive's end now, then every routedStep
			// until routedGrace has passed.
			if wait := time.Until(nextStep); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
			last := !time.Now().Before(graceEnd)
			var more bool
			if more, err = c.extendCatchUp(ctx, name, &cu); err == nil {
				nextStep = time.Now().Add(routedStep)
				if last {
					graceEnd = time.Time{}
				}
				if more {
					oc = nil // the ordered consumer may have read past the old bound
				}
				continue
			}
		}
		if err == nil && done {
			err = c.setCatchUp(ctx, name, nil)
			if err == nil {
				c.log.Info("jetstream: subscription caught up with the events stored before it existed", "subscription", name)
				return
			}
		}
		if err == nil {
			wait = minFetchBackoff
			continue
		}
		if ctx.Err() != nil {
			return
		}
		c.plog.Warn("catchup", "jetstream: copying stored events for a subscription started in the past failed; retrying",
			"subscription", name, "next_archive_seq", cu.next, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, catchUpRetryMax)
	}
}

// extendCatchUp moves cu's bound to the archive's end and records it, reporting whether
// that left more to copy.
func (c *Channel) extendCatchUp(ctx context.Context, name string, cu *catchUpState) (bool, error) {
	last, err := c.archiveLast(ctx)
	if err != nil || last <= cu.bound {
		return false, err
	}
	cu.bound = last
	if err := c.setCatchUp(ctx, name, cu); err != nil {
		return false, err
	}
	return true, nil
}

// copyPage copies the next page (archivePage messages at most) of the catch-up, records
// the position after it, and reports whether the bound was reached. A fetch that brings
// nothing ends the catch-up only if the archive no longer holds any message up to the
// bound (the rest aged out); otherwise it is an error, and catchUp tries again.
func (c *Channel) copyPage(ctx context.Context, name string, oc jetstream.Consumer, cu *catchUpState, match func(channel.Stored) bool) (bool, error) {
	b, err := c.archiveFetch(oc)
	if err != nil {
		return false, fmt.Errorf("archive fetch: %w", err)
	}
	sub := c.sub(name)
	var futures []jetstream.PubAckFuture
	next, n, done := cu.next, 0, false
	for m := range b.Messages() {
		n++
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		seq := md.Sequence.Stream
		if seq > cu.bound {
			done = true
			break
		}
		next = seq + 1
		routes := m.Headers()[headerRoutes]
		if slices.Contains(routes, name) {
			if seq > cu.own {
				continue // routed to it: stored for it already
			}
		} else if e, err := event.DecodeBinary(m.Data()); err != nil || !match(channel.Stored{Event: e, Time: md.Timestamp, Subscriptions: routes}) {
			continue
		}
		msg := &nats.Msg{Subject: sub.subject, Data: m.Data(), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "sluice-catchup."+hashToken(name)+"."+cu.id+"."+strconv.FormatUint(seq, 10))
		f, err := c.js.PublishMsgAsync(msg)
		if err != nil {
			return false, classify(err)
		}
		futures = append(futures, f)
		if seq == cu.bound {
			done = true
			break
		}
	}
	if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		return false, fmt.Errorf("archive fetch: %w", err)
	}
	for _, f := range futures {
		select {
		case pa := <-f.Ok():
			if !pa.Duplicate {
				sub.published.Add(1)
			}
		case err := <-f.Err():
			return false, classify(err)
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if n == 0 {
		// Nothing came: the rest aged out of the archive, or the server was slow to
		// send it (then catchUp fetches again, through a new consumer).
		s, err := c.js.Stream(ctx, c.archive)
		if err != nil {
			return false, fmt.Errorf("archive stream: %w", err)
		}
		if st := s.CachedInfo().State; st.Msgs > 0 && st.FirstSeq <= cu.bound {
			return false, fmt.Errorf("archive fetch brought nothing within %v, though the archive still holds messages from %d and the catch-up copies up to %d: %w",
				archiveIdle, max(st.FirstSeq, cu.next), cu.bound, nats.ErrTimeout)
		}
		done = true // the rest aged out
	}
	if next != cu.next {
		cu.next = next
		if !done { // once done, setCatchUp(nil) or extendCatchUp records it
			if err := c.setCatchUp(ctx, name, cu); err != nil {
				return false, err
			}
		}
	}
	return done, nil
}

// setCatchUp records cu as the copy's state in the subscription's durable consumer, or
// removes it when cu is nil.
func (c *Channel) setCatchUp(ctx context.Context, name string, cu *catchUpState) error {
	jc, err := c.js.Consumer(ctx, c.stream, c.durable(name))
	if err != nil {
		return fmt.Errorf("reading the subscription's consumer: %w", err)
	}
	cfg := jc.CachedInfo().Config
	cfg.Metadata = maps.Clone(cfg.Metadata)
	if cu == nil {
		delete(cfg.Metadata, metaCatchUpFrom)
		delete(cfg.Metadata, metaCatchUpNext)
		delete(cfg.Metadata, metaCatchUpBound)
	} else { // the whole state: another replica may have removed it meanwhile (caught up)
		cfg.Metadata[metaCatchUpID] = cu.id
		cfg.Metadata[metaCatchUpFrom] = cu.from
		cfg.Metadata[metaCatchUpNext] = strconv.FormatUint(cu.next, 10)
		cfg.Metadata[metaCatchUpBound] = strconv.FormatUint(cu.bound, 10)
		cfg.Metadata[metaCatchUpOwn] = strconv.FormatUint(cu.own, 10)
	}
	if _, err := c.js.UpdateConsumer(ctx, c.stream, cfg); err != nil {
		return fmt.Errorf("recording the catch-up's position: %w", err)
	}
	return nil
}

// archiveFrom returns an ordered consumer of the archive starting at cu's position.
func (c *Channel) archiveFrom(ctx context.Context, cu catchUpState) (jetstream.Consumer, error) {
	occ := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case cu.next > 0:
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, cu.next
	case cu.from != "earliest":
		at, _ := time.Parse(time.RFC3339Nano, cu.from) // checked by parseCatchUp
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &at
	}
	oc, err := c.js.OrderedConsumer(ctx, c.archive, occ)
	if err != nil {
		return nil, fmt.Errorf("archive consumer: %w", err)
	}
	return oc, nil
}

// archiveLast returns the archive's last sequence.
func (c *Channel) archiveLast(ctx context.Context) (uint64, error) {
	s, err := c.js.Stream(ctx, c.archive)
	if err != nil {
		return 0, fmt.Errorf("archive stream: %w", err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// recreated opens again the subscription called name, whose durable consumer jc Remove
// kept. From latest it resumes: the consumer is unmarked, with a copy of what the archive
// stored since its removal (going on with a copy under way), up to the archive's end now
// or, with from.Routed, when that is closed.
// Otherwise the consumer and its events are deleted and it returns nil: it starts anew.
func (c *Channel) recreated(ctx context.Context, name string, jc jetstream.Consumer, from channel.StartFrom) (jetstream.Consumer, error) {
	cfg := jc.CachedInfo().Config
	if !from.Latest() {
		return nil, c.deleteSubscription(ctx, name)
	}
	removed, err := strconv.ParseUint(cfg.Metadata[metaRemovedSeq], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("consumer metadata %s: %w", metaRemovedSeq, err)
	}
	last, err := c.archiveLast(ctx)
	if err != nil {
		return nil, err
	}
	cfg.Metadata = maps.Clone(cfg.Metadata)
	delete(cfg.Metadata, metaRemovedSeq)
	delete(cfg.Metadata, metaRemovedAt)
	switch {
	case cfg.Metadata[metaCatchUpBound] != "": // a copy under way: it goes on, up to now
		cfg.Metadata[metaCatchUpBound] = strconv.FormatUint(last, 10)
	default: // even with nothing stored since: what is stored until it is routed is copied
		cfg.Metadata[metaCatchUpID] = catchUpID()
		cfg.Metadata[metaCatchUpFrom] = "earliest"
		cfg.Metadata[metaCatchUpNext] = strconv.FormatUint(removed+1, 10)
		cfg.Metadata[metaCatchUpBound] = strconv.FormatUint(last, 10)
		cfg.Metadata[metaCatchUpOwn] = "0" // what was routed to it is in its subject or was settled
	}
	c.log.Info("jetstream: subscription re-created with the name of a removed one: it resumes where that one stopped",
		"subscription", name, "consumer", c.durable(name), "removed_at", jc.CachedInfo().Config.Metadata[metaRemovedAt])
	return c.js.UpdateConsumer(ctx, c.stream, cfg)
}

// keepRemoved marks the durable consumer of the subscription called name removed and
// keeps it, with the events stored for it, for a subscription re-created with the name
// (ConsumeFrom); then it deletes those removed longer than the retention ago.
func (c *Channel) keepRemoved(ctx context.Context, name string) error {
	jc, err := c.js.Consumer(ctx, c.stream, c.durable(name))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c.deleteSubscription(ctx, name)
	}
	last, lerr := c.archiveLast(ctx)
	if err == nil {
		err = lerr
	}
	if err == nil {
		cfg := jc.CachedInfo().Config
		cfg.Metadata = maps.Clone(cfg.Metadata)
		cfg.Metadata[metaRemovedSeq] = strconv.FormatUint(last, 10)
		cfg.Metadata[metaRemovedAt] = time.Now().UTC().Format(time.RFC3339Nano)
		cfg.InactiveThreshold = 0 // kept for the retention: sweepRemoved deletes it, with its events
		_, err = c.js.UpdateConsumer(ctx, c.stream, cfg)
	}
	if err != nil {
		return fmt.Errorf("jetstream: remove subscription %q of broker %q: keeping it for its re-creation: %w", name, c.brokerKey, unavailable(err))
	}
	c.log.Info("jetstream: subscription removed; its consumer and events are kept for a trigger re-created with its name",
		"subscription", name, "consumer", c.durable(name), "kept_for", c.cfg.retention)
	return c.sweepRemoved(ctx)
}

// sweepRemoved deletes the subscriptions removed (keepRemoved) longer than the retention
// ago that no replica pulls from, with their events.
func (c *Channel) sweepRemoved(ctx context.Context) error {
	s, err := c.js.Stream(ctx, c.stream)
	if err != nil {
		return fmt.Errorf("jetstream: broker %q: listing removed subscriptions: %w", c.brokerKey, unavailable(err))
	}
	var old []string
	l := s.ListConsumers(ctx)
	for info := range l.Info() {
		at, err := time.Parse(time.RFC3339Nano, info.Config.Metadata[metaRemovedAt])
		// A replica that still consumes it (Remove kept it shared) has a pull waiting.
		if err == nil && time.Since(at) > c.cfg.retention && info.NumWaiting == 0 {
			old = append(old, info.Config.Metadata["sluice.subscription"])
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("jetstream: broker %q: listing removed subscriptions: %w", c.brokerKey, unavailable(err))
	}
	for _, name := range old {
		if err := c.deleteSubscription(ctx, name); err != nil {
			return err
		}
		c.log.Info("jetstream: removed subscription not re-created within the retention: deleted with its events", "subscription", name)
	}
	return nil
}

// catchUpID returns a token unique to a new catch-up.
func catchUpID() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }
