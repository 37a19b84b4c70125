package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one connection to RabbitMQ and its publishing channel (in confirm mode).
// It is replaced, never changed: a new connection, or a new publishing channel on the
// same connection, is a new session.
type session struct {
	conn *amqp.Connection
	pub  *amqp.Channel
	rets *returns // the messages RabbitMQ returns on pub
	// blocked is set while RabbitMQ blocks the connection's publishers (a memory or disk
	// alarm); blockedC is closed when a block starts, for Publish calls waiting.
	blocked  *atomic.Bool
	blockedC *atomic.Pointer[chan struct{}]
}

// isBlocked reports whether publishing is blocked, and the channel closed when it
// becomes so.
func (s *session) isBlocked() (bool, <-chan struct{}) {
	return s.blocked.Load(), *s.blockedC.Load()
}

// dial opens a connection and its publishing channel, and declares the exchange.
func (c *Channel) dial() (*session, error) {
	cfg := amqp.Config{
		Vhost:      c.cfg.vhost,
		Heartbeat:  heartbeat,
		Dial:       amqp.DefaultDial(dialTimeout),
		Properties: amqp.NewConnectionProperties(),
	}
	cfg.Properties.SetClientConnectionName("sluice " + c.brokerKey)
	conn, err := amqp.DialConfig(c.cfg.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	s := &session{conn: conn, blocked: new(atomic.Bool), blockedC: new(atomic.Pointer[chan struct{}])}
	open := make(chan struct{})
	s.blockedC.Store(&open)
	if err := c.declareExchange(conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if s.pub, s.rets, err = openPub(conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	// Queues may have been deleted while the connection was down: declare them again
	// before the next message to each.
	c.mu.Lock()
	clear(c.declared)
	c.mu.Unlock()
	return s, nil
}

// openPub opens a publishing channel in confirm mode on conn, and follows the messages
// RabbitMQ returns on it.
func openPub(conn *amqp.Connection) (*amqp.Channel, *returns, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("confirm mode: %w", err)
	}
	return ch, newReturns(ch), nil
}

// declareExchange declares the broker's direct exchange (durable) on a channel of its
// own, which an error closes.
func (c *Channel) declareExchange(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.ExchangeDeclare(c.exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %s: %w", c.exchange, err)
	}
	return nil
}

// current returns the session, or nil while disconnected.
func (c *Channel) current() *session {
	c.sessMu.Lock()
	defer c.sessMu.Unlock()
	return c.sess
}

// waitSession returns the session, waiting for one until ctx ends or the channel closes.
func (c *Channel) waitSession(ctx context.Context) (*session, error) {
	for {
		c.sessMu.Lock()
		s, changed := c.sess, c.changed
		c.sessMu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// setSession makes s the session (nil: disconnected) and wakes those waiting for one.
func (c *Channel) setSession(s *session) {
	c.sessMu.Lock()
	c.sess = s
	close(c.changed)
	c.changed = make(chan struct{})
	c.sessMu.Unlock()
}

// maintain keeps a session open until the channel closes: it connects, reconnects with
// backoff when the connection is lost, reopens the publishing channel when only it was
// closed, and tracks RabbitMQ's blocking of publishers.
func (c *Channel) maintain(first *session) {
	defer c.wg.Done()
	s := first
	backoff := 100 * time.Millisecond
	for {
		if s == nil {
			var err error
			s, err = c.dial()
			if err != nil {
				c.log.Warn("connect", "rabbitmq: cannot connect; retrying", "exchange", c.exchange, "err", err)
				if !c.sleep(backoff) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			c.cfg.logger.Info("rabbitmq: connected", "exchange", c.exchange)
		}
		backoff = 100 * time.Millisecond
		c.setSession(s)
		connClosed := s.conn.NotifyClose(make(chan *amqp.Error, 1))
		blockings := s.conn.NotifyBlocked(make(chan amqp.Blocking, 4))
		s = c.watch(s, connClosed, blockings)
		if c.life.Err() != nil {
			return
		}
	}
}

// watch follows session s until its connection is lost (it returns nil) or its
// publishing channel is (it returns a session on the same connection with a new one,
// or nil if that fails), or the channel closes.
func (c *Channel) watch(s *session, connClosed <-chan *amqp.Error, blockings <-chan amqp.Blocking) *session {
	pubClosed := s.pub.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-c.life.Done():
			c.setSession(nil)
			_ = s.conn.Close()
			return nil
		case err := <-connClosed:
			c.setSession(nil)
			c.log.Warn("lost", "rabbitmq: connection lost; reconnecting", "exchange", c.exchange, "err", errOrNil(err))
			return nil
		case b, ok := <-blockings:
			if !ok {
				blockings = nil
				continue
			}
			if b.Active {
				if s.blocked.Swap(true) {
					continue // blocked already (a second alarm)
				}
				close(*s.blockedC.Load())
				c.log.Warn("blocked", "rabbitmq: RabbitMQ blocks publishing (a memory or disk alarm)", "exchange", c.exchange, "reason", b.Reason)
			} else if s.blocked.Load() {
				open := make(chan struct{})
				s.blockedC.Store(&open)
				s.blocked.Store(false)
				c.cfg.logger.Info("rabbitmq: RabbitMQ publishes again", "exchange", c.exchange)
			}
		case err := <-pubClosed:
			if s.conn.IsClosed() {
				continue // connClosed follows
			}
			c.log.Warn("pub", "rabbitmq: publishing channel closed; reopening", "exchange", c.exchange, "err", errOrNil(err))
			// A publish to a missing exchange (deleted by hand) closes the channel too.
			perr := c.declareExchange(s.conn)
			var pub *amqp.Channel
			var rets *returns
			if perr == nil {
				pub, rets, perr = openPub(s.conn)
			}
			if perr != nil {
				c.log.Warn("pub", "rabbitmq: cannot reopen the publishing channel; reconnecting", "exchange", c.exchange, "err", perr)
				c.setSession(nil)
				_ = s.conn.Close()
				return nil
			}
			s = &session{conn: s.conn, pub: pub, rets: rets, blocked: s.blocked, blockedC: s.blockedC}
			c.setSession(s)
			pubClosed = s.pub.NotifyClose(make(chan *amqp.Error, 1))
		}
	}
}

// errOrNil makes a nil *amqp.Error a nil error (a clean close) for logging.
func errOrNil(err *amqp.Error) error {
	if err == nil {
		return errors.New("closed")
	}
	return err
}

// sleep waits d or until the channel closes; it reports false when it closed.
func (c *Channel) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.life.Done():
		return false
	}
}
