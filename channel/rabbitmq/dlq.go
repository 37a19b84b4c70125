package rabbitmq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
)

var _ channel.DLQStorer = (*Channel)(nil)

const (
	// dlqTimeout bounds how long a Put, List, Delete or Purge waits for its own message
	// of the dead-letter stream to be read back (applied to the index).
	dlqTimeout = 30 * time.Second
	// dlqPrefetch is how many messages of the dead-letter stream RabbitMQ hands the
	// reader before it acknowledges some (each at most the channel's message bound).
	dlqPrefetch = 16
	// dlqOverhead is what the store counts for a message of the dead-letter stream
	// besides its body: RabbitMQ's own framing and properties take less.
	dlqOverhead = 512
)

// Kinds of message of the dead-letter stream: the first byte of its body.
const (
	dlqKindEntry  byte = 'e' // a dead letter: dlq.Encode
	dlqKindDelete byte = 'd' // delete one entry: its ID, uvarint
	dlqKindPurge  byte = 'p' // delete every entry of the trigger stored before it
	dlqKindSync   byte = 's' // nothing: read back, it tells that what came before is applied
)

// DLQQueue is the stream queue that keeps the dead letters of the broker whose exchange
// is exchange: "<exchange>.dlq", shortened with a hash past RabbitMQ's 255 bytes.
func DLQQueue(exchange string) string { return fit(exchange + ".dlq") }

// DLQStore returns the broker's dead-letter store on RabbitMQ (channel.DLQStorer): one
// stream queue per broker, DLQQueue, with x-max-age the limits' MaxAge and
// x-max-length-bytes WithDLQMaxBytes. Every change is a message appended to it: a dead
// letter, the deletion of one (by its ID), the purge of a trigger, a listing's marker.
// An entry's ID is its stream offset plus one, so IDs grow across every replica. Each
// store reads the stream from its first message into an index of the entries it holds,
// applying the limits as it reads: every replica (and a restarted process) applies the
// same messages in the same order and holds the same entries. Besides the limits per
// trigger, an entry is evicted once half of WithDLQMaxBytes of messages (their bodies
// and dlqOverhead each) were appended after it, whatever their trigger: RabbitMQ frees
// the stream's oldest segment only once more than that follows it, so it never frees
// an entry the index holds. Every replica must run with the same limits and bound.
//
// When connected, DLQStore declares the stream before it returns, and fails if RabbitMQ
// refuses it (a node older than 3.9 has no streams): the broker then keeps its dead
// letters in memory. Otherwise the stream is declared and read in the background, so
// that the first listing finds the index built; an error there is retried at each call.
func (c *Channel) DLQStore(ctx context.Context, lim dlq.Limits) (dlq.Store, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	s := &dlqStore{
		c: c, lim: lim, queue: DLQQueue(c.exchange), now: time.Now,
		index: dlq.NewIndex[int64](lim), mine: make(map[string]chan dlqApplied),
	}
	if c.current() != nil {
		ctx, cancel := context.WithTimeout(ctx, dlqTimeout)
		err := s.ensure(ctx)
		cancel()
		if refused(err) {
			return nil, fmt.Errorf("rabbitmq: dead-letter store: %w", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, channel.ErrClosed
	}
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.life, dlqTimeout)
		defer cancel()
		if err := s.ensure(ctx); err != nil && c.life.Err() == nil {
			c.log.Warn("dlq-read", "rabbitmq: dead-letter store: cannot open the stream yet; trying again at its next use", "queue", s.queue, "err", err)
		}
	})
	return s, nil
}

// refused reports whether err is RabbitMQ's refusal of a command (an AMQP error the
// server sent, not a lost or forced-closed connection).
func refused(err error) bool {
	var e *amqp.Error
	return errors.As(err, &e) && e.Server && e.Code != amqp.ConnectionForced
}

// dlqStore is the dead-letter store of one broker on RabbitMQ.
type dlqStore struct {
	c     *Channel
	lim   dlq.Limits
	queue string
	now   func() time.Time
	start channel.StartOnce // declares the log and starts the reader, once (ensure)

	mu      sync.Mutex
	next    int64                      // offset after the last message applied
	counted int64                      // bytes counted of the messages applied (body and dlqOverhead each)
	index   *dlq.Index[int64]          // tagged with counted once each was applied
	mine    map[string]chan dlqApplied // by correlation id: this process's messages not applied yet
	// live: the reader follows the stream and has read back a message of this process
	// since it (re)connected, so it is at the stream's end but for what other replicas
	// appended in the last moments: Holds reads the index as it is.
	live bool
}

// dlqApplied is what applying a message this process appended did.
type dlqApplied struct {
	n     int  // Put: evictions to report; Purge: entries removed
	found bool // Delete: the entry was there
}

// dlqRecord is one decoded message of the dead-letter stream.
type dlqRecord struct {
	kind    byte
	trigger string
	id      uint64    // dlqKindDelete
	entry   dlq.Entry // dlqKindEntry
}

var errDLQRecord = errors.New("corrupt dead-letter message")

// errStoredNotRead is the error of a message RabbitMQ confirmed that the reader did not
// apply in time: it is stored, and every reader will apply it.
var errStoredNotRead = errors.New("stored, not read back yet")

// encodeDLQ writes a message body: its kind, the uvarint length of trigger, trigger,
// then payload.
func encodeDLQ(kind byte, trigger string, payload []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(trigger)+len(payload))
	b = binary.AppendUvarint(append(b, kind), uint64(len(trigger)))
	return append(append(b, trigger...), payload...)
}

// decodeDLQ reads a message of the dead-letter stream (any client that reaches the
// queue may write one, so it is checked). The entry's event data aliases body.
func decodeDLQ(body []byte) (dlqRecord, error) {
	if len(body) == 0 {
		return dlqRecord{}, fmt.Errorf("%w: empty", errDLQRecord)
	}
	r := dlqRecord{kind: body[0]}
	n, k := binary.Uvarint(body[1:])
	if k <= 0 || n > uint64(len(body)-1-k) {
		return dlqRecord{}, fmt.Errorf("%w: trigger length", errDLQRecord)
	}
	r.trigger = string(body[1+k : 1+k+int(n)])
	rest := body[1+k+int(n):]
	if r.trigger == "" && r.kind != dlqKindSync {
		return dlqRecord{}, fmt.Errorf("%w: no trigger", errDLQRecord)
	}
	switch r.kind {
	case dlqKindEntry:
		e, err := dlq.Decode(rest)
		if err != nil {
			return dlqRecord{}, fmt.Errorf("%w: %w", errDLQRecord, err)
		}
		r.entry = e
	case dlqKindDelete:
		id, k := binary.Uvarint(rest)
		if k <= 0 || k != len(rest) {
			return dlqRecord{}, fmt.Errorf("%w: deleted id", errDLQRecord)
		}
		r.id = id
	case dlqKindPurge, dlqKindSync:
		if len(rest) != 0 {
			return dlqRecord{}, fmt.Errorf("%w: %d unexpected bytes", errDLQRecord, len(rest))
		}
	default:
		return dlqRecord{}, fmt.Errorf("%w: kind %q", errDLQRecord, r.kind)
	}
	return r, nil
}

func (s *dlqStore) Durable() bool { return true }

func (s *dlqStore) errf(trigger string, err error) error {
	if errors.Is(err, channel.ErrClosed) || errors.Is(err, dlq.ErrNotFound) || errors.Is(err, channel.ErrUnavailable) {
		return fmt.Errorf("rabbitmq: dead-letter store of %s in stream %s: %w", trigger, s.queue, err)
	}
	return fmt.Errorf("%w: rabbitmq: dead-letter store of %s in stream %s: %w", channel.ErrUnavailable, trigger, s.queue, err)
}

// streamArgs are the dead-letter stream's arguments: RabbitMQ frees what is older than
// MaxAge, and the oldest segments (of an eighth of the bound) past the bytes bound:
// what the store has evicted already.
func (s *dlqStore) streamArgs() amqp.Table {
	return amqp.Table{
		"x-max-age":                       fmt.Sprintf("%ds", int64((s.lim.MaxAge+time.Second-1)/time.Second)),
		"x-max-length-bytes":              s.c.cfg.dlqMaxBytes,
		"x-stream-max-segment-size-bytes": s.c.cfg.dlqMaxBytes / 8,
	}
}

// window is how many counted bytes may follow an entry before it is evicted.
func (s *dlqStore) window() int64 { return s.c.cfg.dlqMaxBytes / 2 }

// ensure declares the stream and starts the reader, once.
func (s *dlqStore) ensure(ctx context.Context) error {
	if s.c.life.Err() != nil {
		return channel.ErrClosed
	}
	return s.start.Do(ctx, func(ctx context.Context) error {
		sess, err := s.c.waitSession(ctx)
		if err != nil {
			return fmt.Errorf("%w: not connected: %w", channel.ErrUnavailable, err)
		}
		if err := s.c.declareStream(sess.conn, s.queue, s.streamArgs()); err != nil {
			return err
		}
		s.c.mu.Lock()
		if s.c.closed {
			s.c.mu.Unlock()
			return channel.ErrClosed
		}
		s.c.wg.Add(1) // Close waits for the reader
		s.c.mu.Unlock()
		go s.read()
		return nil
	})
}

// read applies the stream's messages to the index until the channel closes, consuming
// again (from the next offset) after each lost channel or connection.
func (s *dlqStore) read() {
	defer s.c.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		sess, err := s.c.waitSession(s.c.life)
		if err != nil {
			return
		}
		err = s.follow(sess)
		if s.c.life.Err() != nil {
			return
		}
		s.c.log.Warn("dlq-read", "rabbitmq: dead-letter store: reading the stream stopped; reading it again", "queue", s.queue, "err", err)
		if !s.c.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// follow consumes the stream from the offset after the last message applied, on an AMQP
// channel of its own, until that channel closes or the store's channel does.
func (s *dlqStore) follow(sess *session) error {
	if err := s.c.declareStream(sess.conn, s.queue, s.streamArgs()); err != nil {
		return err
	}
	ch, err := sess.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(dlqPrefetch, 0, false); err != nil {
		return fmt.Errorf("prefetch: %w", err)
	}
	s.mu.Lock()
	var from any = "first"
	if s.next > 0 {
		from = s.next
	}
	s.mu.Unlock()
	s.setLive(false)
	defer s.setLive(false)
	cancelled := ch.NotifyCancel(make(chan string, 1))
	deliveries, err := ch.Consume(s.queue, "", false, false, false, false, amqp.Table{"x-stream-offset": from})
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	unacked := 0
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				select {
				case <-cancelled:
					// RabbitMQ cancels the consumers of a deleted queue: what the stream
					// held is gone, and a new stream starts from offset 0.
					s.mu.Lock()
					s.next, s.counted = 0, 0
					s.index.Reset()
					s.mu.Unlock()
					return errors.New("the stream was deleted")
				default:
				}
				return errors.New("the consuming channel closed")
			}
			s.apply(&d)
			// A stream keeps its messages: an ack only gives credit for more. One ack
			// covers what came before it, sent at half the prefetch, so that the other
			// half keeps coming meanwhile.
			if unacked++; unacked >= dlqPrefetch/2 {
				_ = d.Ack(true)
				unacked = 0
			}
		case <-s.c.life.Done():
			return nil
		}
	}
}

// apply applies one message of the stream to the index.
func (s *dlqStore) apply(d *amqp.Delivery) {
	off, ok := d.Headers["x-stream-offset"].(int64)
	if !ok {
		s.c.log.Warn("dlq-decode", "rabbitmq: dead-letter store: a message without its stream offset skipped", "queue", s.queue)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if off < s.next { // read again from the start of its chunk
		return
	}
	if s.next > 0 && off > s.next {
		// RabbitMQ freed what followed the last message read (the reader was away while
		// more than the stream's bound was appended): every entry held came before it.
		n := s.index.Len()
		s.index.EvictOldestWhile("", func(dlq.Item[int64]) bool { return true })
		s.c.log.Warn("dlq-gap", "rabbitmq: dead-letter store: the stream was freed past where the reader stopped; the dead letters read before are evicted",
			"queue", s.queue, "from_offset", s.next, "to_offset", off, "evicted", n)
	}
	s.next = off + 1
	s.counted += int64(len(d.Body)) + dlqOverhead
	r, err := decodeDLQ(d.Body)
	if err != nil {
		s.c.log.Warn("dlq-decode", "rabbitmq: dead-letter store: unreadable message skipped", "queue", s.queue, "offset", off, "err", err)
		s.boundLocked("")
		return
	}
	var res dlqApplied
	switch r.kind {
	case dlqKindEntry:
		r.entry.ID = uint64(off) + 1
		res.n = s.addLocked(r.trigger, r.entry)
		res.n += s.boundLocked(r.trigger)
	case dlqKindDelete:
		_, res.found = s.index.Delete(r.trigger, r.id)
	case dlqKindPurge:
		res.n = s.index.Purge(r.trigger)
	}
	if r.kind != dlqKindEntry {
		s.boundLocked("")
	}
	if ch := s.mine[d.CorrelationId]; ch != nil && d.CorrelationId != "" {
		delete(s.mine, d.CorrelationId)
		s.live = true
		ch <- res
	}
}

// addLocked appends e to trigger's list after evicting what the limits require (age
// against e's stored time, so that every reader evicts the same) and returns the
// evictions to report to this process's Put.
func (s *dlqStore) addLocked(trigger string, e dlq.Entry) int {
	if e.Time.IsZero() { // another client's
		e.Time = s.now()
	}
	// An entry above the bytes bound (written by a replica with other limits) is not
	// kept: it counts as evicted.
	n := len(s.index.Add(trigger, e, s.counted))
	return n + s.index.TakeExpired(trigger)
}

// boundLocked evicts, oldest first whatever their trigger, the entries followed by more
// than window counted bytes, and returns how many were trigger's; the others' are
// reported by their triggers' next Put in this process.
func (s *dlqStore) boundLocked(trigger string) int {
	return s.index.EvictOldestWhile(trigger, func(it dlq.Item[int64]) bool { return s.counted-it.Tag > s.window() })
}

// setLive records whether the reader is live (List).
func (s *dlqStore) setLive(live bool) {
	s.mu.Lock()
	s.live = live
	s.mu.Unlock()
}

// write appends a message of kind for trigger and waits (up to dlqTimeout) until the
// reader applied it, which it has once it applied everything stored before it.
func (s *dlqStore) write(ctx context.Context, kind byte, trigger string, payload []byte) (dlqApplied, error) {
	if err := s.ensure(ctx); err != nil {
		return dlqApplied{}, err
	}
	body := encodeDLQ(kind, trigger, payload)
	if len(body) > s.c.cfg.maxMessageBytes {
		return dlqApplied{}, fmt.Errorf("a dead letter of %d bytes as a RabbitMQ message is over the channel's %d-byte limit", len(body), s.c.cfg.maxMessageBytes)
	}
	id := uuid.NewString()
	ch := make(chan dlqApplied, 1)
	s.mu.Lock()
	s.mine[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mine, id)
		s.mu.Unlock()
	}()
	if err := s.c.appendStream(ctx, s.queue, s.streamArgs(), amqp.Publishing{
		DeliveryMode: amqp.Persistent, CorrelationId: id, Body: body,
	}); err != nil {
		return dlqApplied{}, err
	}
	wait := time.NewTimer(dlqTimeout)
	defer wait.Stop()
	select {
	case res := <-ch:
		return res, nil
	case <-ctx.Done():
		return dlqApplied{}, fmt.Errorf("%w: %w: %w", channel.ErrUnavailable, errStoredNotRead, ctx.Err())
	case <-wait.C:
		return dlqApplied{}, fmt.Errorf("%w: %w within %s", channel.ErrUnavailable, errStoredNotRead, dlqTimeout)
	case <-s.c.life.Done():
		return dlqApplied{}, channel.ErrClosed
	}
}

// Put stores e. The evictions it reports are those that applying its message made, and
// the entries of trigger this process's List found expired since its last Put. Once
// RabbitMQ confirmed the message, the entry is stored: if it is not read back in time,
// Put answers nil without the count of evictions.
func (s *dlqStore) Put(ctx context.Context, trigger string, e dlq.Entry) (int, error) {
	if size := e.Size(); size > s.lim.MaxBytes {
		return 0, fmt.Errorf("rabbitmq: dead-letter store of %s: a dead letter of %d bytes is larger than --dlq-max-bytes %d", trigger, size, s.lim.MaxBytes)
	}
	e.Time = s.now()
	payload := dlq.Encode(&e)
	if n := int64(len(payload)+len(trigger)) + dlqOverhead; n > s.c.cfg.dlqMaxBytes/8 {
		return 0, fmt.Errorf("rabbitmq: dead-letter store of %s: a dead letter of %d bytes in the stream is larger than an eighth of --rabbitmq-dlq-max-bytes %d", trigger, n, s.c.cfg.dlqMaxBytes)
	}
	res, err := s.write(ctx, dlqKindEntry, trigger, payload)
	if err != nil {
		if errors.Is(err, errStoredNotRead) {
			return 0, nil
		}
		return 0, s.errf(trigger, err)
	}
	return res.n, nil
}

// List returns a page of trigger's entries once the index holds what the stream held
// when it was called: it appends a marker and waits until the reader has read it back.
// Entries past MaxAge are dropped from the index.
func (s *dlqStore) List(ctx context.Context, trigger string, after uint64, limit int) (dlq.Page, error) {
	if _, err := s.write(ctx, dlqKindSync, "", nil); err != nil {
		return dlq.Page{}, s.errf(trigger, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index.Expire(trigger, s.now())
	return s.index.Page(trigger, after, limit), nil
}

// Holds reports whether trigger's entry id is stored (dlq.Holder), as the reader has read
// the stream: once it is live (it has read back a message of this process since it
// connected), without appending a marker, so that a redrive, which asks before each
// attempt, does not fill the stream with markers (each takes room in its bound, and so
// pushes the oldest dead letters out); until then as List does.
func (s *dlqStore) Holds(ctx context.Context, trigger string, id uint64) (bool, error) {
	s.mu.Lock()
	live := s.live
	s.mu.Unlock()
	if !live {
		if _, err := s.write(ctx, dlqKindSync, "", nil); err != nil {
			return false, s.errf(trigger, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index.Expire(trigger, s.now())
	_, ok := s.index.Get(trigger, id)
	return ok, nil
}

// Delete removes entry id: every replica applies the deletion as it reads it.
func (s *dlqStore) Delete(ctx context.Context, trigger string, id uint64) error {
	res, err := s.write(ctx, dlqKindDelete, trigger, binary.AppendUvarint(nil, id))
	if err != nil {
		return s.errf(trigger, err)
	}
	if !res.found {
		return s.errf(trigger, fmt.Errorf("%w: %d", dlq.ErrNotFound, id))
	}
	return nil
}

// Purge removes every entry of trigger stored before it.
func (s *dlqStore) Purge(ctx context.Context, trigger string) (int, error) {
	res, err := s.write(ctx, dlqKindPurge, trigger, nil)
	if err != nil {
		return 0, s.errf(trigger, err)
	}
	return res.n, nil
}
