package rabbitmq_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/rabbitmq"
	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// proxy forwards TCP connections from 127.0.0.1 to a RabbitMQ node, frame by frame from
// the node to the client so that it can add frames of its own (send); cut drops every
// connection, and setDown(true) refuses new ones until setDown(false).
type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	down     bool
	conns    []net.Conn
	clients  []*frameWriter
}

// frameWriter writes whole AMQP frames to a client, from the node or from the test.
type frameWriter struct {
	mu sync.Mutex
	c  net.Conn
}

func (w *frameWriter) write(frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.c.Write(frame)
	return err
}

// copyFrames copies the node's frames (7-byte header, payload, end byte) to w.
func copyFrames(w *frameWriter, node net.Conn) {
	r := bufio.NewReader(node)
	for {
		hdr := make([]byte, 7)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		frame := make([]byte, 7+int(binary.BigEndian.Uint32(hdr[3:]))+1)
		copy(frame, hdr)
		if _, err := io.ReadFull(r, frame[7:]); err != nil || w.write(frame) != nil {
			return
		}
	}
}

// send writes an AMQP method frame on channel 0 (class, method, arguments) to every
// client.
func (p *proxy) send(class, method uint16, args []byte) {
	payload := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, class), method)
	payload = append(payload, args...)
	frame := append([]byte{1, 0, 0}, binary.BigEndian.AppendUint32(nil, uint32(len(payload)))...)
	frame = append(append(frame, payload...), 0xCE)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.clients {
		_ = w.write(frame)
	}
}

func newProxy(t *testing.T, upstream string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			down := p.down
			p.mu.Unlock()
			u, err := net.Dial("tcp", upstream)
			if down || err != nil {
				c.Close()
				continue
			}
			w := &frameWriter{c: c}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.clients = append(p.clients, w)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { copyFrames(w, u); c.Close() }()
		}
	}()
	return p
}

// cut drops every connection; down refuses new ones until up.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns, p.clients = nil, nil
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// through returns the AMQP URL u with its host replaced by the proxy's.
func (p *proxy) through(t *testing.T, u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = p.ln.Addr().String()
	return pu.String()
}

// TestReconnect: with the connection to RabbitMQ lost, Check and Publish say so
// (channel.ErrUnavailable) and nothing hangs; once RabbitMQ is reachable again the
// channel reconnects by itself, and every event Publish accepted, before and after, is
// delivered.
func TestReconnect(t *testing.T) {
	u := rabbitmqtest.URL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, pu.Host)
	c, err := rabbitmq.New(context.Background(), "ns/reconnect", rabbitmq.WithURL(p.through(t, u)),
		rabbitmq.WithPrefix(fmt.Sprintf("reconnect-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := channeltest.Consume(t, c, "sub")
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Events("before", 10)...)
	// Hold one message across the loss: its ack fails, and RabbitMQ delivers it again.
	held := channeltest.ReceiveN(t, k, 1, 20*time.Second)[0]

	p.setDown(true)
	p.cut()
	sluicetest.Eventually(t, 20*time.Second, "Check fails while RabbitMQ is unreachable", func() bool {
		return errors.Is(c.Check(context.Background()), channel.ErrUnavailable)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = c.Publish(ctx, []channel.Envelope{{Event: channeltest.Event("lost"), Subscriptions: []string{"sub"}}})
	cancel()
	if !errors.Is(err, channel.ErrUnavailable) || !strings.Contains(channel.Reason(err), "RabbitMQ") {
		t.Fatalf("Publish while unreachable = %v, want ErrUnavailable saying RabbitMQ", err)
	}
	if err := held.Ack(); err == nil {
		t.Error("Ack of a message whose connection was lost succeeded")
	}

	p.setDown(false)
	sluicetest.Eventually(t, 30*time.Second, "Check passes once RabbitMQ is back", func() bool {
		return c.Check(context.Background()) == nil
	})
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Events("after", 10)...)
	want := map[string]bool{}
	for i := range 10 {
		want[fmt.Sprintf("before%d", i)] = true
		want[fmt.Sprintf("after%d", i)] = true
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(want) > 0 {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatalf("%d events never delivered (%v): %v", len(want), err, want)
		}
		if m.Event().ID == "lost" {
			t.Error("an event Publish refused was stored")
		}
		delete(want, m.Event().ID)
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack after reconnecting: %v", err)
		}
	}
}

// TestRemoveDeletesQueue: Remove right after its consumer held messages deletes the queue
// with them (the consumer's cancellation reaches the queue's consumer count late), so a
// trigger added again under the same name starts empty; a queue another consumer still
// reads is kept.
func TestRemoveDeletesQueue(t *testing.T) {
	u := rabbitmqtest.URL(t)
	prefix := fmt.Sprintf("remove-%d", rand.Uint32())
	open := func() channel.Channel {
		c, err := rabbitmq.New(context.Background(), "ns/remove", rabbitmq.WithURL(u), rabbitmq.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c, other := open(), open()
	k := channeltest.Consume(t, c, "gone")
	channeltest.Publish(t, c, []string{"gone"}, channeltest.Events("old", 5)...)
	channeltest.ReceiveN(t, k, 5, 20*time.Second) // held, unsettled
	if err := c.Remove(channeltest.Ctx(t, 20*time.Second), "gone"); err != nil {
		t.Fatal(err)
	}
	k = channeltest.Consume(t, c, "gone")
	channeltest.ExpectNothing(t, k, time.Second)

	// Another replica (other) consumes "kept": removing it here keeps its events. Consume
	// registers its consumer in the background: both are waited for, as a replica that
	// consumes it has long been.
	channeltest.Consume(t, c, "kept")
	ko := channeltest.Consume(t, other, "kept")
	waitConsumers(t, u, rabbitmq.QueueName(rabbitmq.ExchangeName(prefix, "ns/remove"), "kept"), 2)
	channeltest.Publish(t, c, []string{"kept"}, channeltest.Event("stays"))
	if err := c.Remove(channeltest.Ctx(t, 20*time.Second), "kept"); err != nil {
		t.Fatal(err)
	}
	if m := channeltest.ReceiveN(t, ko, 1, 20*time.Second)[0]; m.Event().ID != "stays" {
		t.Fatalf("got %s", m.Event().ID)
	}
}

// waitConsumers waits until the queue called queue on the node at u has n consumers.
func waitConsumers(t *testing.T, u, queue string, n int) {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	sluicetest.Eventually(t, 30*time.Second, fmt.Sprintf("%d consumers of queue %s", n, queue), func() bool {
		ch, err := conn.Channel() // a passive declare of a missing queue closes its channel
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ch.Close() }()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err == nil && q.Consumers >= n
	})
}

// TestBlocked: while RabbitMQ blocks publishers (connection.blocked, sent on a memory or
// disk alarm; here by the proxy), Check and Publish fail at once with
// channel.ErrUnavailable saying so; once unblocked, Publish stores again.
func TestBlocked(t *testing.T) {
	u := rabbitmqtest.URL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, pu.Host)
	c, err := rabbitmq.New(context.Background(), "ns/blocked", rabbitmq.WithURL(p.through(t, u)),
		rabbitmq.WithPrefix(fmt.Sprintf("blocked-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := channeltest.Consume(t, c, "sub")
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Event("before"))

	reason := "low on memory"
	p.send(10, 60, append([]byte{byte(len(reason))}, reason...)) // connection.blocked
	p.send(10, 60, append([]byte{byte(len(reason))}, reason...)) // twice: a second alarm
	sluicetest.Eventually(t, 20*time.Second, "Check fails while publishing is blocked", func() bool {
		return errors.Is(c.Check(context.Background()), channel.ErrUnavailable)
	})
	if r := channel.Reason(c.Check(context.Background())); !strings.Contains(r, "blocks publishing") {
		t.Errorf("Check's reason %q does not say publishing is blocked", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = c.Publish(ctx, []channel.Envelope{{Event: channeltest.Event("refused"), Subscriptions: []string{"sub"}}})
	cancel()
	if !errors.Is(err, channel.ErrUnavailable) || !strings.Contains(channel.Reason(err), "blocks publishing") {
		t.Fatalf("Publish while blocked = %v, want ErrUnavailable saying publishing is blocked", err)
	}

	p.send(10, 61, nil) // connection.unblocked
	sluicetest.Eventually(t, 20*time.Second, "Check passes once unblocked", func() bool {
		return c.Check(context.Background()) == nil
	})
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Event("after"))
	got := channeltest.ReceiveN(t, k, 2, 20*time.Second)
	if got[0].Event().ID != "before" || got[1].Event().ID != "after" {
		t.Fatalf("received %s, %s; want before, after", got[0].Event().ID, got[1].Event().ID)
	}
	channeltest.AckAll(t, got)
}

// TestPublishAfterQueueDeleted: a queue this process declared and another replica
// deleted since (its Remove saw no consumer) is not trusted: RabbitMQ returns the
// unroutable message, Publish declares the queue again and sends it again, and the
// event arrives. A message of the same batch whose queue exists arrives once.
func TestPublishAfterQueueDeleted(t *testing.T) {
	u := rabbitmqtest.URL(t)
	prefix := fmt.Sprintf("deleted-%d", rand.Uint32())
	open := func() *rabbitmq.Channel {
		c, err := rabbitmq.New(context.Background(), "ns/b", rabbitmq.WithURL(u), rabbitmq.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := open(), open()
	ctx := channeltest.Ctx(t, 60*time.Second)
	channeltest.Publish(t, a, []string{"t"}, channeltest.Event("e1")) // declares t's queue
	channeltest.Publish(t, a, []string{"u"}, channeltest.Event("u1")) // and u's
	if err := b.Remove(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	err := a.Publish(ctx, []channel.Envelope{
		{Event: channeltest.Event("e2"), Subscriptions: []string{"t"}},
		{Event: channeltest.Event("u2"), Subscriptions: []string{"u"}},
		{Event: channeltest.Event("e3"), Subscriptions: []string{"t", "u"}},
	})
	if err != nil {
		t.Fatalf("Publish after t's queue was deleted: %v", err)
	}
	kt, ku := channeltest.Consume(t, a, "t"), channeltest.Consume(t, a, "u")
	got := func(k channel.Consumer, n int) []string {
		ms := channeltest.ReceiveN(t, k, n, 20*time.Second)
		channeltest.AckAll(t, ms)
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.Event().ID)
		}
		return ids
	}
	if ids := got(kt, 2); strings.Join(ids, ",") != "e2,e3" {
		t.Errorf("t's queue holds %v, want e2, e3 (e1 went with the deleted queue)", ids)
	}
	if ids := got(ku, 3); strings.Join(ids, ",") != "u1,u2,e3" {
		t.Errorf("u's queue holds %v, want u1, u2, e3", ids)
	}
	channeltest.ExpectNothing(t, kt, time.Second)
	channeltest.ExpectNothing(t, ku, time.Second)
}

// TestConsumeDuringRemove: a subscription opened again while its Remove is under way (a
// trigger added back while its old self's queue is being deleted; here Remove waits for
// the connection) is not the consumer Remove closes, nor the queue it deletes: Consume
// waits for the Remove, then opens a new queue, and what is published to it afterwards
// is delivered.
func TestConsumeDuringRemove(t *testing.T) {
	u := rabbitmqtest.URL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, pu.Host)
	c, err := rabbitmq.New(context.Background(), "ns/readd", rabbitmq.WithURL(p.through(t, u)),
		rabbitmq.WithPrefix(fmt.Sprintf("readd-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := channeltest.Ctx(t, 60*time.Second)
	old := channeltest.Consume(t, c, "t")
	channeltest.Publish(t, c, []string{"t"}, channeltest.Event("old"))

	p.setDown(true)
	p.cut()
	sluicetest.Eventually(t, 20*time.Second, "the connection is lost", func() bool {
		return c.Check(context.Background()) != nil
	})
	removed := make(chan error, 1)
	go func() { removed <- c.Remove(ctx, "t") }() // waits for the connection
	type opened struct {
		k   channel.Consumer
		err error
	}
	reopened := make(chan opened, 1)
	go func() {
		for { // Remove first: it closes the old consumer once under way
			if _, err := old.Receive(ctx); errors.Is(err, channel.ErrClosed) || ctx.Err() != nil {
				break
			}
		}
		k, err := c.Consume(ctx, "t")
		reopened <- opened{k, err}
	}()
	select {
	case o := <-reopened:
		t.Fatalf("Consume returned (%v) while the subscription's Remove was under way", o.err)
	case err := <-removed:
		t.Fatalf("Remove returned (%v) without a connection", err)
	case <-time.After(2 * time.Second): // Consume only given a chance to be early
	}

	p.setDown(false)
	if err := <-removed; err != nil {
		t.Fatalf("Remove: %v", err)
	}
	var o opened
	select {
	case o = <-reopened:
	case <-ctx.Done():
		t.Fatal("Consume never returned after the Remove")
	}
	if o.err != nil {
		t.Fatalf("Consume after the Remove: %v", o.err)
	}
	channeltest.Publish(t, c, []string{"t"}, channeltest.Event("new"))
	if m := channeltest.ReceiveN(t, o.k, 1, 20*time.Second)[0]; m.Event().ID != "new" {
		t.Fatalf("the reopened subscription got %s, want new (old went with the removed queue)", m.Event().ID)
	}
	channeltest.ExpectNothing(t, o.k, time.Second)
}
