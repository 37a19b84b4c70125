package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
)

// declareStream declares the stream queue called name on a channel of its own (an
// error closes it), with args besides its type. A stream that exists with other
// arguments (declared by a process with other settings) is used as it is, logged.
func (c *Channel) declareStream(conn *amqp.Connection, name string, args amqp.Table) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: rabbitmq: stream %s: opening a channel: %w", channel.ErrUnavailable, name, err)
	}
	defer func() { _ = ch.Close() }()
	all := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeStream}
	for k, v := range args {
		all[k] = v
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, all)
	if amqpCode(err) == amqp.PreconditionFailed && len(args) > 0 {
		c.log.Warn("args", "rabbitmq: the stream exists with other arguments; using it as it is", "queue", name, "err", err)
		if ch, err = conn.Channel(); err != nil {
			return fmt.Errorf("%w: rabbitmq: stream %s: opening a channel: %w", channel.ErrUnavailable, name, err)
		}
		defer func() { _ = ch.Close() }()
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	if err != nil {
		return fmt.Errorf("%w: rabbitmq: declaring the stream %s (a stream queue needs RabbitMQ 3.9 or later): %w", channel.ErrUnavailable, name, err)
	}
	return nil
}

// appendStream appends pub to the stream queue called name on the publishing channel,
// mandatory, and returns once RabbitMQ confirmed it. A message RabbitMQ returns (the
// stream was deleted, by an operator) declares the stream again with args and is sent
// once more. It overwrites pub.MessageId (the publishing channel's returns use it).
func (c *Channel) appendStream(ctx context.Context, name string, args amqp.Table, pub amqp.Publishing) error {
	for round := 1; ; round++ {
		s, err := c.waitSession(ctx)
		if err != nil {
			return fmt.Errorf("%w: rabbitmq: not connected: %w", channel.ErrUnavailable, err)
		}
		returned, err := c.appendOnce(ctx, s, name, pub)
		if err != nil || !returned {
			return err
		}
		if round == 2 {
			return fmt.Errorf("%w: rabbitmq: no stream %s after declaring it again", channel.ErrUnavailable, name)
		}
		if err := c.declareStream(s.conn, name, args); err != nil {
			return err
		}
	}
}

// appendOnce publishes pub to stream name on s and waits for its confirm; returned
// reports that RabbitMQ had no such queue.
func (c *Channel) appendOnce(ctx context.Context, s *session, name string, pub amqp.Publishing) (returned bool, err error) {
	if blocked, _ := s.isBlocked(); blocked {
		return false, fmt.Errorf("%w: rabbitmq: RabbitMQ blocks publishing (a memory or disk alarm)", channel.ErrUnavailable)
	}
	call := s.rets.begin()
	defer s.rets.end(call)
	pub.MessageId = messageID(call, 0)
	dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false, pub)
	if err != nil {
		return false, fmt.Errorf("%w: rabbitmq: publishing to %s: %w", channel.ErrUnavailable, name, err)
	}
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return false, fmt.Errorf("%w: rabbitmq: %s did not confirm in time: %w", channel.ErrUnavailable, name, ctx.Err())
	}
	if !dc.Acked() {
		return false, fmt.Errorf("%w: rabbitmq: %s did not store the message (nacked, or the connection was lost)", channel.ErrUnavailable, name)
	}
	return s.rets.taken(call)[0], nil
}
