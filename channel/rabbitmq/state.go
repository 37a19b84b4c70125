package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.StateStorer = (*Channel)(nil)

const (
	// stateMaxRecord bounds one message of the state stream: a trigger's flags. A
	// larger message (written by another client) is skipped unread.
	stateMaxRecord = 1 << 10
	// statePrefetch is how many messages of the state stream RabbitMQ hands a watch
	// before it acknowledges some.
	statePrefetch = 64
)

// StateQueue is the stream queue that keeps the trigger flags of the broker whose
// exchange is exchange: "<exchange>.state", shortened with a hash past RabbitMQ's 255
// bytes. It has no '/', so no subscription's queue ("<exchange>/<sub>") has its name.
func StateQueue(exchange string) string { return fit(exchange + ".state") }

// stateRecord is one message of the state stream: a trigger's flags, or the marker a
// watch writes to learn where the stream ended when it began (Sync, a random nonce).
type stateRecord struct {
	Trigger string               `json:"trigger,omitempty"`
	Flags   channel.TriggerFlags `json:"flags"`
	Sync    string               `json:"sync,omitempty"`
}

// decodeState reads a message of the state stream (written by any client that reaches
// the queue, so it is checked): a trigger's flags, or a watch's marker.
func decodeState(body []byte) (stateRecord, error) {
	if len(body) > stateMaxRecord {
		return stateRecord{}, fmt.Errorf("state message of %d bytes: over the %d-byte bound", len(body), stateMaxRecord)
	}
	var r stateRecord
	if err := json.Unmarshal(body, &r); err != nil {
		return stateRecord{}, fmt.Errorf("state message: %w", err)
	}
	if (r.Trigger == "") == (r.Sync == "") {
		return stateRecord{}, errors.New("state message: want either a trigger or a sync marker")
	}
	return r, nil
}

// StateStore returns the broker's trigger flags on RabbitMQ (channel.StateStorer): a
// stream queue (x-queue-type stream, RabbitMQ 3.9 or later), StateQueue, declared when
// the store is opened. Set appends a message naming the trigger and its flags; every
// watch reads the stream from its first message and follows it, so the latest message
// of a trigger holds. The stream is never truncated: it grows by one small message per
// pause or resume, and per watch begun (a broker's start or reconnection).
func (c *Channel) StateStore(ctx context.Context) (channel.StateStore, error) {
	s := &stateStore{c: c, queue: StateQueue(c.exchange)}
	sess, err := c.waitSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: state stream %s: not connected: %w", channel.ErrUnavailable, s.queue, err)
	}
	if err := s.declare(sess.conn); err != nil {
		return nil, err
	}
	return s, nil
}

// stateStore is channel.StateStore on a stream queue.
type stateStore struct {
	c     *Channel
	queue string
}

// declare declares the state stream.
func (s *stateStore) declare(conn *amqp.Connection) error {
	return s.c.declareStream(conn, s.queue, nil)
}

// append appends r to the stream (declaring it again if an operator deleted it) and
// returns once RabbitMQ confirmed it.
func (s *stateStore) append(ctx context.Context, r stateRecord) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.c.appendStream(ctx, s.queue, nil, amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
}

func (s *stateStore) Set(ctx context.Context, trigger string, f channel.TriggerFlags) error {
	if trigger == "" {
		return errors.New("rabbitmq: state: empty trigger name")
	}
	if err := s.append(ctx, stateRecord{Trigger: trigger, Flags: f}); err != nil {
		return fmt.Errorf("rabbitmq: storing the flags of trigger %s: %w", trigger, err)
	}
	return nil
}

// Get reads the stream to where it ended when Get began: a store's flags are few.
func (s *stateStore) Get(ctx context.Context, trigger string) (channel.TriggerFlags, error) {
	f, synced, err := channel.WatchedFlags(ctx, s.Watch, trigger)
	if err != nil || synced {
		return f, err
	}
	return channel.TriggerFlags{}, fmt.Errorf("rabbitmq: flags of trigger %s: %w: %w", trigger, channel.ErrUnavailable,
		errors.Join(ctx.Err(), fmt.Errorf("the state stream %s could not be read", s.queue)))
}

// Watch consumes the stream from its first message on an AMQP channel of its own, then
// appends a sync marker of its own: when it reads that marker back, it has reported
// every message stored before it began. The watch ends when its channel or connection
// closes (the broker watches again).
func (s *stateStore) Watch(ctx context.Context) (<-chan channel.StateChange, error) {
	sess, err := s.c.waitSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: state stream %s: not connected: %w", channel.ErrUnavailable, s.queue, err)
	}
	if err := s.declare(sess.conn); err != nil {
		return nil, err
	}
	ch, err := sess.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: rabbitmq: opening a channel: %w", channel.ErrUnavailable, err)
	}
	if err := ch.Qos(statePrefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: rabbitmq: prefetch: %w", channel.ErrUnavailable, err)
	}
	deliveries, err := ch.Consume(s.queue, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: rabbitmq: consuming the state stream %s: %w", channel.ErrUnavailable, s.queue, err)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	marker := hex.EncodeToString(nonce[:])
	if err := s.append(ctx, stateRecord{Sync: marker}); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("rabbitmq: state stream %s: %w", s.queue, err)
	}
	out := make(chan channel.StateChange)
	go func() {
		defer close(out)
		defer func() { _ = ch.Close() }()
		send := func(c channel.StateChange) bool {
			select {
			case out <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			var d amqp.Delivery
			var ok bool
			select {
			case d, ok = <-deliveries:
			case <-ctx.Done():
				return
			}
			if !ok {
				s.c.log.Warn("state", "rabbitmq: the watch of the state stream ended (channel or connection closed)", "queue", s.queue)
				return
			}
			_ = d.Ack(false) // a stream keeps its messages: the ack gives credit for more
			r, err := decodeState(d.Body)
			switch {
			case err != nil:
				s.c.log.Warn("state", "rabbitmq: ignoring a message of the state stream that sluice did not write", "queue", s.queue, "err", err)
			case r.Sync == marker:
				if !send(channel.StateChange{}) {
					return
				}
			case r.Trigger != "":
				if !send(channel.StateChange{Trigger: r.Trigger, Flags: r.Flags}) {
					return
				}
			}
		}
	}()
	return out, nil
}
