package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// futuresPool recycles the slices of pending acknowledgements of Publish calls.
var futuresPool = sync.Pool{New: func() any { s := make([]jetstream.PubAckFuture, 0, 64); return &s }}

// encodingPool recycles the encodings of published events. The client holds a message's
// data until JetStream acknowledges it (it may send it again before that), so an encoding
// goes back to the pool only once every message carrying it was acknowledged; after a
// failure it is left to the garbage collector.
var encodingPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledEncoding is the largest encoding kept for reuse.
const maxPooledEncoding = 64 << 10

// Publish stores one message per (event, routed subscription) in the broker's stream and
// returns nil once the server has acknowledged every one of them (stored them on disk).
// The messages are sent asynchronously and the acknowledgements awaited together, so a
// batch costs about one round trip.
//
// Errors wrap channel.ErrFull (stream at its MaxBytes, too many publishes awaiting
// acknowledgement), channel.ErrTooLarge (over the stream's or the server's message size)
// or channel.ErrUnavailable (not connected, no JetStream, store failure, the embedded
// server's disk full, ctx ended), as a channel.Refusal with the reason. On error some
// messages may be stored anyway; the caller rejects the request and the client's retry
// makes duplicates, which at-least-once delivery allows.
func (c *Channel) Publish(ctx context.Context, envs []channel.Envelope) error {
	if c.closed.Load() {
		return channel.ErrClosed
	}
	n := 0
	for i := range envs {
		n += len(envs[i].Subscriptions)
	}
	if n == 0 {
		return nil
	}
	if c.cfg.diskFull != nil && c.cfg.diskFull() {
		// Counted, not logged per request: diskHeal logs the disk filling up once (with the
		// directory, which a client's answer does not carry) and logs it freed.
		return c.countFailed(errDiskFull)
	}
	lost := c.conn.Lost()
	if st := c.nc.Status(); st != nats.CONNECTED {
		return c.publishFailed(channel.Refuse(channel.ErrUnavailable, "the NATS connection is "+strings.ToLower(st.String()), nil))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, publishTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	stall := jetstream.WithStallWait(max(time.Until(deadline), time.Millisecond))

	fp := futuresPool.Get().(*[]jetstream.PubAckFuture)
	futures := (*fp)[:0]
	defer func() {
		clear(futures)
		*fp = futures[:0]
		futuresPool.Put(fp)
	}()
	var held [4]*[]byte // the encodings, for the pool once acknowledged
	encodings := held[:0]
	for i := range envs {
		env := &envs[i]
		if len(env.Subscriptions) == 0 {
			continue
		}
		// One encoding per event, shared read-only by its messages.
		ep := encodingPool.Get().(*[]byte)
		data := event.AppendBinary(slices.Grow((*ep)[:0], env.Event.Size()), env.Event)
		*ep = data
		encodings = append(encodings, ep)
		for _, name := range env.Subscriptions {
			sub := c.sub(name)
			f, err := c.js.PublishMsgAsync(&nats.Msg{Subject: sub.subject, Data: data}, stall)
			if err != nil {
				return c.publishFailed(classify(err))
			}
			// Counted once sent: one that fails to be stored is in Len's estimate only
			// until its next ask of the server (Consumer.Len).
			sub.published.Add(1)
			futures = append(futures, f)
		}
		if c.archive != "" { // archive.go
			f, err := c.js.PublishMsgAsync(c.archiveMsg(data, env.Subscriptions), stall)
			if err != nil {
				return c.publishFailed(classify(err))
			}
			futures = append(futures, f)
		}
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return c.publishFailed(classify(err))
		case <-lost:
			return c.publishFailed(channel.Refuse(channel.ErrUnavailable,
				fmt.Sprintf("NATS connection lost while waiting for JetStream to acknowledge %d messages", len(futures)), nil))
		case <-ctx.Done():
			return c.publishFailed(channel.Refuse(channel.ErrUnavailable,
				fmt.Sprintf("waiting for JetStream to acknowledge %d messages", len(futures)), ctx.Err()))
		}
	}
	for _, ep := range encodings {
		if cap(*ep) <= maxPooledEncoding {
			encodingPool.Put(ep)
		}
	}
	if c.metrics != nil {
		c.metrics.published.Add(uint64(n))
	}
	return nil
}

// errDiskFull is Publish's error while the embedded server's disk is full.
var errDiskFull = channel.Refuse(channel.ErrUnavailable,
	fmt.Sprintf("the disk under the embedded server's data directory is full; publishes resume once %d MiB are free", healMinFree>>20), nil)

// publishFailed logs (at most once per ratelog.Every while failures repeat: an outage
// fails every request) and counts err, and returns it.
func (c *Channel) publishFailed(err error) error {
	c.plog.Warn("publish", "jetstream publish failed", "stream", c.stream, "err", err)
	return c.countFailed(err)
}

// countFailed counts err in the publish errors metric and returns it, naming the broker.
func (c *Channel) countFailed(err error) error {
	if c.metrics != nil {
		switch {
		case errors.Is(err, channel.ErrFull):
			c.metrics.errFull.Add(1)
		case errors.Is(err, channel.ErrTooLarge):
			c.metrics.errTooLarge.Add(1)
		default:
			c.metrics.errUnavailable.Add(1)
		}
	}
	return fmt.Errorf("jetstream: publish to broker %q: %w", c.brokerKey, err)
}

// classify wraps a publish error with its kind (channel.ErrFull, ErrTooLarge or
// ErrUnavailable) and a reason a person can act on.
func classify(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.ErrorCode == jsErrCodeStoreFailed && strings.Contains(apiErr.Description, "maximum"):
			return channel.Refuse(channel.ErrFull, "stream limit reached, waiting for consumers to settle events", err)
		case apiErr.ErrorCode == jsErrCodeInsufficientResources:
			return channel.Refuse(channel.ErrUnavailable, "JetStream store is out of space", err)
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
			return channel.Refuse(channel.ErrTooLarge, "event larger than the stream's maximum message size", err)
		}
		return channel.Refuse(channel.ErrUnavailable, "JetStream refused the message", err)
	}
	switch {
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return channel.Refuse(channel.ErrFull, "too many messages awaiting JetStream acknowledgement", err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return channel.Refuse(channel.ErrUnavailable, "no JetStream stream answers (stream deleted or JetStream down)", err)
	case errors.Is(err, nats.ErrMaxPayload):
		return channel.Refuse(channel.ErrTooLarge, "event larger than the NATS server's largest message", err)
	}
	return unavailable(err)
}

// unavailable wraps err with channel.ErrUnavailable unless it already is.
func unavailable(err error) error {
	if errors.Is(err, channel.ErrUnavailable) || errors.Is(err, channel.ErrFull) {
		return err
	}
	return fmt.Errorf("%w: %w", channel.ErrUnavailable, err)
}

// JetStream API error codes the client does not name.
const (
	jsErrCodeInsufficientResources jetstream.ErrorCode = 10023
	jsErrCodeStoreFailed           jetstream.ErrorCode = 10077
)
