package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
)

var _ channel.DLQStorer = (*Channel)(nil)

// DLQStore returns the broker's dead-letter store on Kafka (channel.DLQStorer): one
// compacted topic of one partition, "<topic>.dlq", created on first use. A record is an
// entry, keyed by "<trigger>\x00<unique id>"; a record with that key and no value (a
// tombstone) deletes it. An entry's time is the storing process's clock, kept in the
// record's value. An entry's ID is its offset plus one, so IDs grow across every
// replica. Each store reads the topic from its start into an index of the entries it
// holds, applying the limits as it reads: every replica (and a restarted process) applies
// the same records in the same order and holds the same entries. A replica that evicts
// an entry to make room writes its tombstone, so compaction frees it. Every replica must
// run with the same limits.
func (c *Channel) DLQStore(_ context.Context, lim dlq.Limits) (dlq.Store, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	name := c.topic
	if len(name) > 249-len(".dlq") {
		name = name[:249-len(".dlq")]
	}
	return &dlqStore{
		c: c, lim: lim, topic: name + ".dlq", now: time.Now,
		advanced: make(chan struct{}),
		index:    dlq.NewIndex[string](lim), keys: make(map[string]uint64), mine: make(map[string]chan dlqApplied),
	}, nil
}

// dlqTimeout bounds a listing, delete or purge of the dead-letter store (reading the
// topic up to its end, writing tombstones), and how long Put waits to read back its
// record before it answers without the count of evictions.
const dlqTimeout = 30 * time.Second

// dlqStore is the dead-letter store of one broker on Kafka.
type dlqStore struct {
	c     *Channel
	lim   dlq.Limits
	topic string
	start channel.StartOnce // declares the log and starts the reader, once (ensure)
	now   func() time.Time

	mu       sync.Mutex
	next     int64                      // offset after the last record applied
	advanced chan struct{}              // closed (and replaced) when next moves
	index    *dlq.Index[string]         // tagged with their record keys
	keys     map[string]uint64          // record key -> ID of the entry the index holds
	mine     map[string]chan dlqApplied // keys this process produced, waiting to be applied
}

// dlqApplied is what applying a record this process produced did.
type dlqApplied struct {
	evicted []string // keys of the entries it evicted
	counted int      // evictions to report (evicted, plus expired in List)
}

func (s *dlqStore) Durable() bool { return true }

func (s *dlqStore) errf(trigger string, err error) error {
	if errors.Is(err, channel.ErrClosed) || errors.Is(err, dlq.ErrNotFound) {
		return fmt.Errorf("kafka: dead-letter store of %s: %w", trigger, err)
	}
	return fmt.Errorf("%w: kafka: dead-letter store of %s in topic %s: %w", channel.ErrUnavailable, trigger, s.topic, err)
}

// ensure creates the topic if needed and starts the reader once.
func (s *dlqStore) ensure(ctx context.Context) error {
	if s.c.life.Err() != nil {
		return channel.ErrClosed
	}
	return s.start.Do(ctx, func(ctx context.Context) error {
		rf := s.c.cfg.replication
		if rf == 0 {
			rf = -1
		}
		configs := s.c.cfg.topicConfigs(rf)
		if configs == nil {
			configs = make(map[string]*string)
		}
		compact := "compact"
		configs["cleanup.policy"] = &compact
		_, err := s.c.adm.CreateTopic(ctx, 1, rf, configs, s.topic)
		switch {
		case err == nil: // created with one partition
		case errors.Is(err, kerr.TopicAlreadyExists):
			if err := s.checkPartitions(ctx); err != nil {
				return err
			}
		default:
			return fmt.Errorf("creating topic %s: %w", s.topic, err)
		}
		rd, err := kgo.NewClient(s.c.clientOpts(
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().AtStart()}}),
			kgo.FetchMaxBytes(fetchMaxBytes), kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
		)...)
		if err != nil {
			return fmt.Errorf("reading topic %s: %w", s.topic, err)
		}
		s.c.mu.Lock()
		if s.c.closed {
			s.c.mu.Unlock()
			rd.Close()
			return channel.ErrClosed
		}
		s.c.wg.Add(1) // Close waits for the reader
		s.c.mu.Unlock()
		go s.read(rd)
		return nil
	})
}

// checkPartitions refuses an existing topic of more than one partition: records are
// produced by key, so some would land where the reader does not look, and the order of
// IDs would be lost. A topic another replica just created may not be known to every
// broker yet: that is asked again for a few seconds.
func (s *dlqStore) checkPartitions(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		td, err := s.c.adm.ListTopics(ctx, s.topic)
		if err == nil {
			err = td.Error()
		}
		switch {
		case err == nil:
			if n := len(td[s.topic].Partitions); n != 1 {
				return fmt.Errorf("topic %s has %d partitions; the dead-letter store needs exactly 1 (delete the topic, or turn the store off with --dlq-max-entries 0)", s.topic, n)
			}
			return nil
		case !errors.Is(err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("describing topic %s: %w", s.topic, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("describing topic %s: %w", s.topic, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// read applies the topic's records to the index until the channel closes.
func (s *dlqStore) read(rd *kgo.Client) {
	defer s.c.wg.Done()
	defer rd.Close()
	for {
		fs := rd.PollFetches(s.c.life)
		if s.c.life.Err() != nil {
			return
		}
		fs.EachError(func(t string, _ int32, err error) {
			s.c.log.Warn("dlq-read", "kafka: dead-letter store: reading failed", "topic", t, "err", err)
		})
		s.mu.Lock()
		fs.EachRecord(s.applyLocked)
		close(s.advanced)
		s.advanced = make(chan struct{})
		s.mu.Unlock()
	}
}

// applyLocked applies one record of the topic to the index.
func (s *dlqStore) applyLocked(r *kgo.Record) {
	s.next = r.Offset + 1
	key := string(r.Key)
	trigger, e, err := decodeDLQRecord(r.Key, r.Value)
	if err != nil {
		s.c.log.Warn("dlq-decode", "kafka: dead-letter store: unreadable record skipped", "topic", r.Topic, "offset", r.Offset, "err", err)
		return
	}
	if r.Value == nil { // a tombstone
		if id, ok := s.keys[key]; ok {
			delete(s.keys, key)
			s.index.Delete(trigger, id)
		}
		return
	}
	e.ID = uint64(r.Offset) + 1
	if e.Time.IsZero() {
		e.Time = r.Timestamp
	}
	var res dlqApplied
	s.keys[key] = e.ID
	// An entry above the bytes bound (written by a replica with other limits) is not
	// kept: it is among the evicted, so that its tombstone is written too.
	for _, it := range s.index.Add(trigger, e, key) {
		res.evicted = append(res.evicted, it.Tag)
		delete(s.keys, it.Tag)
	}
	if ch := s.mine[key]; ch != nil {
		delete(s.mine, key)
		res.counted = len(res.evicted) + s.index.TakeExpired(trigger)
		ch <- res
	}
}

// waitApplied waits until the index has applied every record below offset off.
func (s *dlqStore) waitApplied(ctx context.Context, off int64) error {
	for {
		s.mu.Lock()
		next, ch := s.next, s.advanced
		s.mu.Unlock()
		if next >= off {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.c.life.Done():
			return channel.ErrClosed
		}
	}
}

// catchUp waits until the index has applied every record the topic holds now, so that
// what another replica stored or deleted before is seen.
func (s *dlqStore) catchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dlqTimeout)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return err
	}
	// A topic just created may not be in every broker's metadata yet: its end offset is
	// asked again until it is, within dlqTimeout.
	for {
		ends, err := s.c.adm.ListEndOffsets(ctx, s.topic)
		if err != nil {
			return err
		}
		o, ok := ends.Lookup(s.topic, 0)
		switch {
		case ok && o.Err == nil:
			return s.waitApplied(ctx, o.Offset)
		case ok && !kerr.IsRetriable(o.Err):
			return o.Err
		}
		select {
		case <-ctx.Done():
			if ok {
				return fmt.Errorf("end offset of %s: %w (%w)", s.topic, o.Err, ctx.Err())
			}
			return fmt.Errorf("no end offset for %s: %w", s.topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tombstones writes a tombstone for each key without waiting for the cluster: the
// entries are already out of the index; a lost tombstone leaves a record that the next
// reading of the topic evicts again.
func (s *dlqStore) tombstones(keys []string) {
	for _, k := range keys {
		s.c.cl.Produce(s.c.life, &kgo.Record{Topic: s.topic, Key: []byte(k)}, func(_ *kgo.Record, err error) {
			if err != nil && s.c.life.Err() == nil {
				s.c.log.Warn("dlq-tombstone", "kafka: dead-letter store: tombstone of an evicted entry not written", "topic", s.topic, "err", err)
			}
		})
	}
}

// Put stores e. The evictions it reports are those that applying its record made, and
// the entries of trigger this process's List found expired since its last Put.
func (s *dlqStore) Put(ctx context.Context, trigger string, e dlq.Entry) (int, error) {
	if size := e.Size(); size > s.lim.MaxBytes {
		return 0, fmt.Errorf("kafka: dead-letter store of %s: a dead letter of %d bytes is larger than --dlq-max-bytes %d", trigger, size, s.lim.MaxBytes)
	}
	if err := s.ensure(ctx); err != nil {
		return 0, s.errf(trigger, err)
	}
	e.Time = s.now()
	key := trigger + "\x00" + uuid.NewString()
	ch := make(chan dlqApplied, 1)
	s.mu.Lock()
	s.mine[key] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.mine, key)
		s.mu.Unlock()
	}
	r := &kgo.Record{Topic: s.topic, Key: []byte(key), Value: encodeDLQValue(&e)}
	if err := s.c.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		forget()
		return 0, s.errf(trigger, err)
	}
	wait := time.NewTimer(dlqTimeout)
	defer wait.Stop()
	select {
	case res := <-ch:
		s.tombstones(res.evicted)
		return res.counted, nil
	case <-ctx.Done(): // stored (acks=all); only the count of evictions is unknown
	case <-wait.C:
	case <-s.c.life.Done():
	}
	forget()
	return 0, nil
}

// List returns a page of trigger's entries once the index holds what the topic held
// when it was called. Entries past MaxAge are dropped from the index (and tombstoned).
func (s *dlqStore) List(ctx context.Context, trigger string, after uint64, limit int) (dlq.Page, error) {
	if err := s.catchUp(ctx); err != nil {
		return dlq.Page{}, s.errf(trigger, err)
	}
	s.mu.Lock()
	p, expired := s.pageLocked(trigger, after, limit)
	s.mu.Unlock()
	s.tombstones(expired)
	return p, nil
}

// pageLocked returns a page of trigger's entries and the keys of those it dropped as
// expired.
func (s *dlqStore) pageLocked(trigger string, after uint64, limit int) (dlq.Page, []string) {
	var expired []string
	for _, it := range s.index.Expire(trigger, s.now()) {
		expired = append(expired, it.Tag)
		delete(s.keys, it.Tag)
	}
	return s.index.Page(trigger, after, limit), expired
}

// remove writes tombstones for keys and waits until the index applied them.
func (s *dlqStore) remove(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	rs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		rs[i] = &kgo.Record{Topic: s.topic, Key: []byte(k)}
	}
	if err := s.c.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return err
	}
	last := int64(0)
	for _, r := range rs {
		last = max(last, r.Offset)
	}
	ctx, cancel := context.WithTimeout(ctx, dlqTimeout)
	defer cancel()
	return s.waitApplied(ctx, last+1)
}

// Delete removes entry id.
func (s *dlqStore) Delete(ctx context.Context, trigger string, id uint64) error {
	if err := s.catchUp(ctx); err != nil {
		return s.errf(trigger, err)
	}
	s.mu.Lock()
	it, _ := s.index.Get(trigger, id)
	key := it.Tag
	s.mu.Unlock()
	if key == "" {
		return fmt.Errorf("%w: %d", dlq.ErrNotFound, id)
	}
	if err := s.remove(ctx, []string{key}); err != nil {
		return s.errf(trigger, err)
	}
	return nil
}

// Purge removes every entry of trigger.
func (s *dlqStore) Purge(ctx context.Context, trigger string) (int, error) {
	if err := s.catchUp(ctx); err != nil {
		return 0, s.errf(trigger, err)
	}
	s.mu.Lock()
	var keys []string
	for _, it := range s.index.Items(trigger) {
		keys = append(keys, it.Tag)
	}
	s.mu.Unlock()
	if err := s.remove(ctx, keys); err != nil {
		return 0, s.errf(trigger, err)
	}
	return len(keys), nil
}

// encodeDLQValue writes e as dlq.Encode does, its time included.
func encodeDLQValue(e *dlq.Entry) []byte { return dlq.Encode(e) }

var errDLQRecord = errors.New("corrupt dead-letter record")

// decodeDLQRecord reads a record of the dead-letter topic: the trigger from its key
// ("<trigger>\x00<unique id>") and, unless value is nil (a tombstone), the entry
// encodeDLQValue wrote. The event's data aliases value.
func decodeDLQRecord(key, value []byte) (string, dlq.Entry, error) {
	i := bytes.IndexByte(key, 0)
	if i <= 0 || i == len(key)-1 {
		return "", dlq.Entry{}, fmt.Errorf("%w: key %q is not <trigger>\\x00<id>", errDLQRecord, key)
	}
	trigger := string(key[:i])
	if value == nil {
		return trigger, dlq.Entry{}, nil
	}
	e, err := dlq.Decode(value)
	if err != nil {
		return "", dlq.Entry{}, fmt.Errorf("%w: %w", errDLQRecord, err)
	}
	return trigger, e, nil
}
