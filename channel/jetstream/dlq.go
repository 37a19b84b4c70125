package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
)

var _ channel.DLQStorer = (*Channel)(nil)

// DLQStore returns the broker's dead-letter store on JetStream (channel.DLQStorer):
// one stream per trigger, sluice_dlq_<hash>, created when the trigger first stores or
// is listed. Its limits are the server's own (MaxMsgs, MaxBytes, MaxAge, discard
// old), so they hold across every replica; an entry's ID is its stream sequence.
func (c *Channel) DLQStore(_ context.Context, lim dlq.Limits) (dlq.Store, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &dlqStore{c: c, lim: lim}, nil
}

// dlqStore is the dead-letter store of one broker on JetStream.
type dlqStore struct {
	c   *Channel
	lim dlq.Limits

	mu      sync.Mutex
	ensured map[string]jetstream.Stream
	puts    map[string]*sync.Mutex // one Put at a time per trigger, to count evictions
}

func (s *dlqStore) Durable() bool { return true }

// names returns the stream and subject of trigger's store.
func (s *dlqStore) names(trigger string) (stream, subject string) {
	h := hashToken(s.c.brokerKey + "\n" + trigger)
	return prefix + "_dlq_" + h, prefix + ".dlq." + h
}

// stream returns trigger's stream, creating it if create.
func (s *dlqStore) stream(ctx context.Context, trigger string, create bool) (jetstream.Stream, error) {
	s.mu.Lock()
	st := s.ensured[trigger]
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	name, subj := s.names(trigger)
	var err error
	if create {
		st, err = s.c.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "sluice dead letters of " + trigger + " of broker " + s.c.brokerKey,
			Subjects:    []string{subj},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxMsgs:     int64(s.lim.MaxEntries),
			MaxBytes:    s.lim.MaxBytes,
			MaxAge:      s.lim.MaxAge,
			MaxMsgSize:  int32(min(s.lim.MaxBytes, math.MaxInt32)), // a larger one would evict all, itself too
			Storage:     jetstream.FileStorage,
			Replicas:    s.c.cfg.replicas,
			Metadata:    map[string]string{"sluice.broker": s.c.brokerKey, "sluice.dlq": trigger},
		})
	} else {
		st, err = s.c.js.Stream(ctx, name)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.ensured == nil {
		s.ensured = make(map[string]jetstream.Stream)
	}
	s.ensured[trigger] = st
	s.mu.Unlock()
	return st, nil
}

func (s *dlqStore) putLock(trigger string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.puts == nil {
		s.puts = make(map[string]*sync.Mutex)
	}
	m := s.puts[trigger]
	if m == nil {
		m = new(sync.Mutex)
		s.puts[trigger] = m
	}
	return m
}

// Put stores e; the evictions it reports are those the server made while it stored
// (another replica storing at the same moment may be counted by either). A store that
// was within its limits with room for e evicted nothing: then dead letters deleted
// meanwhile (a redrive's acks, on any replica) are not counted.
func (s *dlqStore) Put(ctx context.Context, trigger string, e dlq.Entry) (int, error) {
	st, err := s.stream(ctx, trigger, true)
	if err != nil {
		return 0, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	_, subj := s.names(trigger)
	data := encodeEntry(&e)
	size := int64(len(data) + len(subj) + msgOverhead)
	if size > s.lim.MaxBytes {
		return 0, fmt.Errorf("jetstream: dead-letter store of %s: a dead letter of %d bytes is larger than --dlq-max-bytes %d", trigger, size, s.lim.MaxBytes)
	}
	l := s.putLock(trigger)
	l.Lock()
	defer l.Unlock()
	before, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	full := before.State.Msgs+1 > uint64(s.lim.MaxEntries) || int64(before.State.Bytes)+size > s.lim.MaxBytes
	if _, err := s.c.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data}); err != nil {
		s.mu.Lock()
		delete(s.ensured, trigger) // deleted behind our back, say: the next Put creates it again
		s.mu.Unlock()
		return 0, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	if !full {
		return 0, nil
	}
	after, err := st.Info(ctx)
	if err != nil { // stored; only the count of evictions is unknown
		return 0, nil
	}
	return max(0, int(before.State.Msgs)+1-int(after.State.Msgs)), nil
}

// List reads up to limit entries above after, one direct get each.
func (s *dlqStore) List(ctx context.Context, trigger string, after uint64, limit int) (dlq.Page, error) {
	limit = dlq.ClampPage(limit)
	st, err := s.stream(ctx, trigger, false)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return dlq.Page{}, nil
	}
	if err != nil {
		return dlq.Page{}, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	info, err := st.Info(ctx)
	if err != nil {
		return dlq.Page{}, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	p := dlq.Page{Total: int(info.State.Msgs), Bytes: int64(info.State.Bytes)}
	if p.Total > 0 {
		p.Last = info.State.LastSeq
	}
	_, subj := s.names(trigger)
	seq := max(after+1, info.State.FirstSeq)
	for seq <= info.State.LastSeq {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return dlq.Page{}, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
		}
		if len(p.Entries) == limit {
			p.Next = p.Entries[len(p.Entries)-1].ID
			break
		}
		e, err := decodeEntry(m.Data)
		if err != nil { // not written by this store: skipped, still counted in Total
			s.c.log.Warn("jetstream: dead-letter store: unreadable entry skipped", "trigger", trigger, "seq", m.Sequence, "err", err)
		} else {
			e.ID, e.Time = m.Sequence, m.Time
			p.Entries = append(p.Entries, e)
		}
		seq = m.Sequence + 1
	}
	return p, nil
}

// Delete removes entry id.
func (s *dlqStore) Delete(ctx context.Context, trigger string, id uint64) error {
	st, err := s.stream(ctx, trigger, false)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return dlq.ErrNotFound
	}
	if err == nil {
		err = st.DeleteMsg(ctx, id)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful):
		return fmt.Errorf("%w: %d: %w", dlq.ErrNotFound, id, err)
	case err != nil:
		return fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	return nil
}

// Purge removes every entry.
func (s *dlqStore) Purge(ctx context.Context, trigger string) (int, error) {
	st, err := s.stream(ctx, trigger, false)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	var info *jetstream.StreamInfo
	if err == nil {
		info, err = st.Info(ctx)
	}
	if err == nil {
		err = st.Purge(ctx)
	}
	if err != nil {
		return 0, fmt.Errorf("jetstream: dead-letter store of %s: %w", trigger, unavailable(err))
	}
	return int(info.State.Msgs), nil
}

// msgOverhead is what JetStream counts for a message besides its subject and data.
const msgOverhead = 64

// encodeEntry is dlq.Encode without the entry's time: the message's own timestamp is it.
func encodeEntry(e *dlq.Entry) []byte {
	c := *e
	c.Time = time.Time{}
	return dlq.Encode(&c)
}

// decodeEntry reads what encodeEntry wrote. The event's data aliases b.
func decodeEntry(b []byte) (dlq.Entry, error) { return dlq.Decode(b) }
