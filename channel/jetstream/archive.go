package jetstream

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// A broker with a retention (WithRetention) has, beside its work-queue stream, an
// archive: a stream PREFIX_<broker-hash>_log with limits retention and MaxAge the
// retention, on subject PREFIX_log.<broker-hash>, where Publish stores each event once
// more, with its routes in headerRoutes. The work-queue stream deletes what is
// acknowledged; the archive keeps it for replay (channel.Replayer), within WithMaxBytes
// too (past it, its oldest messages go first).
const (
	headerRoutes = "Sluice-Sub"
	// archivePage bounds the archived messages one fetch of a replay holds.
	archivePage = 256
	// archiveIdle is how long one fetch of a replay waits for the archive's next
	// message. A fetch that brings none before the replay reached the archive's last
	// message as of its start ends the replay only if that message is gone (MaxAge or
	// MaxBytes deleted the rest meanwhile); otherwise the replay fetches again, and
	// fails after archiveEmptyFetches such fetches in a row.
	archiveIdle = 2 * time.Second
	// archiveEmptyFetches bounds the fetches in a row that bring nothing while the
	// archive still holds messages the replay has not read.
	archiveEmptyFetches = 5
)

var _ channel.Replayer = (*Channel)(nil)

// WithRetention keeps every published event at least d in the broker's archive stream
// (MaxAge d), acknowledged or not, for replay; 0 (the default) keeps no archive and the
// channel replays nothing. It costs one more stored message per event.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// openArchive creates or updates the archive stream when a retention is set.
func (c *Channel) openArchive(ctx context.Context, bh string) error {
	if c.cfg.retention <= 0 {
		return nil
	}
	c.archive = c.stream + "_log"
	c.archiveSubj = prefix + "_log." + bh
	_, err := c.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        c.archive,
		Description: "sluice broker " + c.brokerKey + ": every event, kept for replay",
		Subjects:    []string{c.archiveSubj},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.cfg.retention,
		MaxBytes:    c.cfg.maxBytes, // past it the oldest go first
		Storage:     jetstream.FileStorage,
		Replicas:    c.cfg.replicas,
		Metadata:    map[string]string{"sluice.broker": c.brokerKey},
	})
	if err != nil {
		return fmt.Errorf("jetstream: create archive stream %s for broker %q: %w", c.archive, c.brokerKey, unavailable(err))
	}
	return nil
}

// archiveMsg is the archive's message of an event encoded as data, routed to subs.
func (c *Channel) archiveMsg(data []byte, subs []string) *nats.Msg {
	h := make(nats.Header, 1)
	h[headerRoutes] = slices.Clone(subs) // the client may resend the message after Publish returned; the caller reuses subs
	return &nats.Msg{Subject: c.archiveSubj, Data: data, Header: h}
}

// Retention returns the archive's MaxAge (channel.Replayer); without an archive, an
// error wrapping channel.ErrNotKept.
func (c *Channel) Retention(context.Context) (time.Duration, error) {
	if c.archive == "" {
		return 0, fmt.Errorf("jetstream: broker %q: %w: it has no sluice.dev/retention", c.brokerKey, channel.ErrNotKept)
	}
	return c.cfg.retention, nil
}

// Replay streams the archived events stored in [from, to) (channel.Replayer), in the
// order they were stored, through an ordered consumer starting at from. It reads up to
// the archive's last message as of its start, a page (archivePage) at a time; it ends
// early only when the rest of that was deleted meanwhile (aged out), and fails when
// archiveEmptyFetches fetches in a row bring nothing though the rest is still there.
func (c *Channel) Replay(ctx context.Context, from, to time.Time) iter.Seq2[channel.Stored, error] {
	return func(yield func(channel.Stored, error) bool) {
		fail := func(what string, err error) {
			yield(channel.Stored{}, fmt.Errorf("jetstream: replay of broker %q: %s: %w", c.brokerKey, what, unavailable(err)))
		}
		if c.archive == "" {
			yield(channel.Stored{}, fmt.Errorf("jetstream: broker %q: %w: it has no sluice.dev/retention", c.brokerKey, channel.ErrNotKept))
			return
		}
		s, err := c.js.Stream(ctx, c.archive)
		if err != nil {
			fail("archive stream", err)
			return
		}
		last := s.CachedInfo().State.LastSeq
		if last == 0 || s.CachedInfo().State.LastTime.Before(from) {
			return
		}
		start := from
		cons, err := c.js.OrderedConsumer(ctx, c.archive, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start})
		if err != nil {
			fail("ordered consumer", err)
			return
		}
		var read uint64 // stream sequence of the last message read
		empty := 0      // fetches in a row that brought nothing
		for {
			b, err := cons.Fetch(archivePage, jetstream.FetchMaxWait(archiveIdle))
			if err != nil {
				fail("fetch", err)
				return
			}
			n := 0
			for m := range b.Messages() {
				n++
				md, err := m.Metadata()
				if err != nil {
					continue
				}
				read = md.Sequence.Stream
				if md.Sequence.Stream > last || !md.Timestamp.Before(to) {
					return
				}
				if md.Timestamp.Before(from) {
					continue
				}
				e, err := event.DecodeBinary(m.Data())
				if err != nil {
					continue // corrupt: the work-queue side terminated it too
				}
				if !yield(channel.Stored{Event: e, Time: md.Timestamp, Subscriptions: m.Headers()[headerRoutes]}, nil) {
					return
				}
				if md.Sequence.Stream == last {
					return
				}
			}
			if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
				fail("fetch", err)
				return
			}
			if ctx.Err() != nil {
				yield(channel.Stored{}, ctx.Err())
				return
			}
			if n > 0 {
				empty = 0
				continue
			}
			// Nothing came before last: the rest aged out meanwhile, or the server was
			// slow to send it.
			info, err := s.Info(ctx)
			if err != nil {
				fail("archive stream", err)
				return
			}
			if st := info.State; st.Msgs == 0 || st.FirstSeq > last {
				return // the rest aged out
			}
			if empty++; empty >= archiveEmptyFetches {
				fail("fetch", fmt.Errorf("%d fetches in a row brought nothing, though the archive still holds messages up to %d and the replay read up to %d: %w",
					empty, last, read, nats.ErrTimeout))
				return
			}
		}
	}
}
