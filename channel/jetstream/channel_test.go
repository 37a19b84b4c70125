package jetstream

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

func TestRoundTripPreservesEvent(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default")
	cons := consume(t, c, "trigger-a")

	data := make([]byte, 2048)
	for i := range data {
		data[i] = byte(i) // every byte value, including 0 and invalid UTF-8
	}
	want := &event.Event{
		SpecVersion:     "1.0",
		ID:              "a-1",
		Source:          "https://example.com/src?q=1",
		Type:            "io.sluice.roundtrip",
		DataContentType: "application/octet-stream",
		DataSchema:      "https://example.com/schema",
		Subject:         "s/ü/1",
		Time:            "2024-05-06T07:08:09.123456789Z",
		Extensions:      []event.Extension{{Name: "partitionkey", Value: "k1"}, {Name: "traceparent", Value: "00-ab-cd-01"}, {Name: "empty", Value: ""}},
		Data:            data,
	}
	publish(t, c, channel.Envelope{Event: want, Subscriptions: []string{"trigger-a"}})

	m := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
	got := m.Event()
	if !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("data differs: got %d bytes", len(got.Data))
	}
	g, w := *got, *want
	g.Data, w.Data = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("event differs:\n got %+v\nwant %+v", g, w)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := m.Ack(); err == nil {
		t.Fatal("second Ack succeeded")
	}
}

func TestRouting(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default")
	// Subscription names need not be valid NATS tokens.
	const a, b = "trigger.a *>", "trigger b"
	ca, cb := consume(t, c, a), consume(t, c, b)

	publish(t, c,
		channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{a}},
		channel.Envelope{Event: testEvent(2, nil), Subscriptions: []string{b}},
		channel.Envelope{Event: testEvent(3, nil), Subscriptions: []string{a, b}},
		channel.Envelope{Event: testEvent(4, nil)}, // routed nowhere: not stored
	)
	tests := []struct {
		cons channel.Consumer
		want []string
	}{
		{ca, []string{"id-000001", "id-000003"}},
		{cb, []string{"id-000002", "id-000003"}},
	}
	for _, tt := range tests {
		var got []string
		for range tt.want {
			m := channeltest.ReceiveN(t, tt.cons, 1, 5*time.Second)[0]
			got = append(got, m.Event().ID)
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("got %v, want %v", got, tt.want)
		}
		channeltest.ExpectNothing(t, tt.cons, 200*time.Millisecond)
	}
}

func TestStreamOrder(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default", WithFetchBatch(16))
	cons := consume(t, c, "ordered")
	const n = 500
	for i := 0; i < n; i += 50 {
		envs := make([]channel.Envelope, 50)
		for j := range envs {
			envs[j] = channel.Envelope{Event: testEvent(i+j, nil), Subscriptions: []string{"ordered"}}
		}
		publish(t, c, envs...)
	}
	for i := range n {
		m := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
		if want := testEvent(i, nil).ID; m.Event().ID != want {
			t.Fatalf("message %d: got %s, want %s", i, m.Event().ID, want)
		}
		_ = m.Ack()
	}
}

// TestUnackedSurviveRestart closes everything without settling some messages and checks
// that a server restarted from the same directory delivers exactly those again.
func TestUnackedSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	e, err := StartEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, nc, "demo/default", WithAckWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consume(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		if err := c.Publish(ctx, []channel.Envelope{{Event: testEvent(i, []byte("x")), Subscriptions: []string{"t"}}}); err != nil {
			t.Fatal(err)
		}
	}
	unacked := map[string]bool{}
	for i := range n {
		m := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
		if i%2 == 0 {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		} else {
			unacked[m.Event().ID] = true // held, never settled: as in a crash
		}
	}
	// Acks are not confirmed; wait until the server has applied them.
	sluicetest.Eventually(t, 5*time.Second, "acks applied", func() bool { return cons.Len() == n/2 })
	_ = c.Close()
	nc.Close()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	e2 := startServer(t, dir)
	c2 := newChannel(t, connect(t, e2), "demo/default", WithAckWait(time.Second))
	cons2 := consume(t, c2, "t")
	got := map[string]bool{}
	for range n / 2 {
		m := channeltest.ReceiveN(t, cons2, 1, 10*time.Second)[0]
		got[m.Event().ID] = true
		_ = m.Ack()
	}
	if !reflect.DeepEqual(got, unacked) {
		t.Fatalf("redelivered %v, want %v", got, unacked)
	}
	channeltest.ExpectNothing(t, cons2, 1500*time.Millisecond)
}

// TestHeldMessageKeptAlive holds a message for several AckWaits and checks the server
// does not redeliver it meanwhile (retries belong to the dispatcher), then that
// Release makes it come back.
func TestHeldMessageKeptAlive(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default", WithAckWait(500*time.Millisecond))
	cons := consume(t, c, "t")
	publish(t, c, channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{"t"}})
	m := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
	channeltest.ExpectNothing(t, cons, 2*time.Second) // 4 × AckWait
	if !m.Release() {
		t.Fatal("Release reported the event lost")
	}
	m2 := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
	if m2.Event().ID != m.Event().ID {
		t.Fatalf("got %s after release, want %s", m2.Event().ID, m.Event().ID)
	}
	if err := m2.Ack(); err != nil {
		t.Fatal(err)
	}
	channeltest.ExpectNothing(t, cons, 1500*time.Millisecond)
}

func TestPublishUnavailable(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(t *testing.T, e *Embedded, c *Channel)
	}{
		{"server shut down", func(t *testing.T, e *Embedded, c *Channel) {
			if err := e.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
		{"stream deleted", func(t *testing.T, e *Embedded, c *Channel) {
			if err := c.js.DeleteStream(context.Background(), c.Stream()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startServer(t, t.TempDir())
			c := newChannel(t, connect(t, e), "demo/default")
			publish(t, c, channel.Envelope{Event: testEvent(0, nil), Subscriptions: []string{"t"}})
			tt.breakIt(t, e, c)

			const limit = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			start := time.Now()
			err := c.Publish(ctx, []channel.Envelope{{Event: testEvent(1, nil), Subscriptions: []string{"t"}}})
			took := time.Since(start)
			if !errors.Is(err, channel.ErrUnavailable) {
				t.Fatalf("got %v, want ErrUnavailable", err)
			}
			if took > limit+20*time.Second { // bounds a hang; the machine's load sets the rest
				t.Fatalf("Publish took %v, deadline was %v", took, limit)
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// TestEventTooLarge: an event over the server's largest message is refused with
// ErrTooLarge, saying so, and counted as too_large (the conformance suite's TooLarge
// checks that the channel goes on storing).
func TestEventTooLarge(t *testing.T) {
	e := startServer(t, t.TempDir())
	reg := prometheus.NewRegistry()
	c := newChannel(t, connect(t, e), "demo/default", WithRegisterer(reg))
	err := c.Publish(context.Background(), []channel.Envelope{{Event: testEvent(0, make([]byte, DefaultMaxPayload+1)), Subscriptions: []string{"t"}}})
	if !errors.Is(err, channel.ErrTooLarge) || errors.Is(err, channel.ErrUnavailable) {
		t.Fatalf("got %v, want ErrTooLarge only", err)
	}
	if r := channel.Reason(err); r != "event larger than the NATS server's largest message" {
		t.Errorf("Reason %q", r)
	}
	want := map[string]float64{`broker="demo/default",reason="full"`: 0, `broker="demo/default",reason="too_large"`: 1,
		`broker="demo/default",reason="unavailable"`: 0}
	if got := sluicetest.Gather(t, reg, "sluice_jetstream_publish_errors_total"); !reflect.DeepEqual(got, want) {
		t.Errorf("publish errors metric: got %v, want %v", got, want)
	}
}

func TestStoreFull(t *testing.T) {
	e := startServer(t, t.TempDir())
	reg := prometheus.NewRegistry()
	c := newChannel(t, connect(t, e), "demo/default", WithMaxBytes(64<<10), WithRegisterer(reg))
	data := make([]byte, 2048)

	var err error
	stored := 0
	start := time.Now()
	for ; stored < 1000; stored++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.Publish(ctx, []channel.Envelope{{Event: testEvent(stored, data), Subscriptions: []string{"t"}}})
		cancel()
		if err != nil {
			break
		}
	}
	if !errors.Is(err, channel.ErrFull) || !strings.Contains(err.Error(), "maximum bytes") {
		t.Fatalf("after %d events: got %v, want ErrFull naming the limit", stored, err)
	}
	if stored < 10 {
		t.Fatalf("stored %d events in %v before the limit", stored, time.Since(start))
	}
	t.Logf("full after %d events: %v", stored, err)
	want := map[string]float64{`broker="demo/default",reason="full"`: 1, `broker="demo/default",reason="too_large"`: 0,
		`broker="demo/default",reason="unavailable"`: 0}
	if got := sluicetest.Gather(t, reg, "sluice_jetstream_publish_errors_total"); !reflect.DeepEqual(got, want) {
		t.Fatalf("publish errors metric: got %v, want %v", got, want)
	}

	// Settling events frees room: publishing works again.
	cons := consume(t, c, "t")
	for range 5 {
		if err := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	sluicetest.Eventually(t, 5*time.Second, "room after acks", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Publish(ctx, []channel.Envelope{{Event: testEvent(9999, data), Subscriptions: []string{"t"}}}) == nil
	})
}

// TestSharedConsumer runs two channels of one broker on two network connections to one
// server, as replicas sharing an external cluster do: together they see every message
// once.
func TestSharedConsumer(t *testing.T) {
	e := startServer(t, t.TempDir(), WithListen("127.0.0.1:0"))
	url := e.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("client URL %q", url)
	}
	var replicas [2]*Channel
	var conss [2]channel.Consumer
	for i := range replicas {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		replicas[i] = newChannel(t, nc, "demo/default", WithFetchBatch(8))
		conss[i] = consume(t, replicas[i], "shared")
	}
	const n = 1000
	for i := 0; i < n; i += 100 {
		envs := make([]channel.Envelope, 100)
		for j := range envs {
			envs[j] = channel.Envelope{Event: testEvent(i+j, nil), Subscriptions: []string{"shared"}}
		}
		publish(t, replicas[(i/100)%2], envs...)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	var per [2]int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, cons := range conss {
		wg.Go(func() {
			for {
				m, err := cons.Receive(ctx)
				if err != nil {
					return
				}
				// Slow each replica a little so that both take part.
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				seen[m.Event().ID]++
				per[i]++
				done := len(seen) == n
				mu.Unlock()
				_ = m.Ack()
				if done {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("saw %d distinct events, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("event %s delivered %d times", id, k)
		}
	}
	if per[0] == 0 || per[1] == 0 {
		t.Errorf("split %v: one replica got nothing", per)
	}
	t.Logf("split between replicas: %v", per)
}

// Between two asks of the server, Len moves its last answer by what this process
// published to the subscription and acknowledged of it: ingress's backlog bound reads it
// every millisecond, and a 100 ms old answer let whole bursts in (docs/overload.md).
func TestLenBetweenAsks(t *testing.T) {
	c, cons := lagging(t)
	cons.lagMu.Lock()
	cons.lagAt = time.Now().Add(time.Hour) // no more asks: every answer below is the estimate
	cons.lagMu.Unlock()
	envs := make([]channel.Envelope, 5)
	for i := range envs {
		envs[i] = channel.Envelope{Event: testEvent(i, nil), Subscriptions: []string{"lagging", "other"}}
	}
	publish(t, c, envs...)
	if got := cons.Len(); got != 5 {
		t.Fatalf("lag %d after 5 published, want 5", got)
	}
	msgs := channeltest.ReceiveN(t, cons, 3, 5*time.Second)
	for _, m := range msgs[:2] {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	msgs[2].Release() // still stored: still counted
	if got := cons.Len(); got != 3 {
		t.Fatalf("lag %d after 2 of 5 acknowledged, want 3", got)
	}
}

func TestLen(t *testing.T) {
	e := startServer(t, t.TempDir())
	reg := prometheus.NewRegistry()
	c := newChannel(t, connect(t, e), "demo/default", WithRegisterer(reg))
	cons := consume(t, c, "lagging")
	other := consume(t, c, "other")
	envs := make([]channel.Envelope, 7)
	for i := range envs {
		envs[i] = channel.Envelope{Event: testEvent(i, nil), Subscriptions: []string{"lagging"}}
	}
	publish(t, c, envs...)
	sluicetest.Eventually(t, 5*time.Second, "lag 7", func() bool { return cons.Len() == 7 })
	if got := other.Len(); got != 0 {
		t.Fatalf("other subscription lag %d, want 0", got)
	}
	for range 3 {
		_ = channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0].Ack()
	}
	sluicetest.Eventually(t, 5*time.Second, "lag 4", func() bool { return cons.Len() == 4 })

	want := map[string]float64{`broker="demo/default",subscription="lagging"`: 4, `broker="demo/default",subscription="other"`: 0}
	if got := sluicetest.Gather(t, reg, "sluice_jetstream_consumer_lag"); !reflect.DeepEqual(got, want) {
		t.Fatalf("lag metric: got %v, want %v", got, want)
	}
}

func TestClosed(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default")
	cons := consume(t, c, "t")
	_ = c.Close()
	ctx := context.Background()
	if _, err := cons.Receive(ctx); !errors.Is(err, channel.ErrClosed) {
		t.Errorf("Receive after Close: %v", err)
	}
	if err := c.Publish(ctx, []channel.Envelope{{Event: testEvent(0, nil), Subscriptions: []string{"t"}}}); !errors.Is(err, channel.ErrClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
	if _, err := c.Consume(ctx, "t"); !errors.Is(err, channel.ErrClosed) {
		t.Errorf("Consume after Close: %v", err)
	}
}

func TestRemove(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default")
	_ = consume(t, c, "gone")
	publish(t, c, channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{"gone", "kept"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	// A new subscription of the same name starts empty; the other keeps its event.
	channeltest.ExpectNothing(t, consume(t, c, "gone"), 300*time.Millisecond)
	if id := channeltest.ReceiveN(t, consume(t, c, "kept"), 1, 5*time.Second)[0].Event().ID; id != "id-000001" {
		t.Fatalf("kept subscription got %s", id)
	}
}

// TestLargeEvent stores an event at the broker's default 1 MiB body limit, beyond
// NATS's default max payload.
func TestLargeEvent(t *testing.T) {
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default")
	cons := consume(t, c, "t")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	publish(t, c, channel.Envelope{Event: testEvent(1, data), Subscriptions: []string{"t"}})
	m := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
	if !bytes.Equal(m.Event().Data, data) {
		t.Fatalf("got %d bytes back", len(m.Event().Data))
	}
	_ = m.Ack()
}

// TestRemoveKeepsShared: a subscription removed by one replica while another still
// consumes it keeps its durable consumer and its events; the last replica to remove it
// deletes the consumer.
func TestRemoveKeepsShared(t *testing.T) {
	e := startServer(t, t.TempDir(), WithListen("127.0.0.1:0"))
	var replicas [2]*Channel
	var conss [2]channel.Consumer
	for i := range replicas {
		nc, err := nats.Connect(e.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		replicas[i] = newChannel(t, nc, "demo/default", WithFetchBatch(8))
		conss[i] = consume(t, replicas[i], "shared")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Replica 1 waits in a pull request: it still consumes the subscription.
	sluicetest.Eventually(t, 5*time.Second, "both replicas pulling", func() bool {
		jc, err := replicas[0].js.Consumer(ctx, replicas[0].stream, replicas[0].durable("shared"))
		return err == nil && jc.CachedInfo().NumWaiting >= 2
	})
	if err := replicas[0].Remove(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	jc, err := replicas[0].js.Consumer(ctx, replicas[0].stream, replicas[0].durable("shared"))
	if err != nil {
		t.Fatalf("the consumer another replica uses was deleted: %v", err)
	}
	if got := jc.CachedInfo().Config.InactiveThreshold; got != InactiveThreshold {
		t.Errorf("kept consumer's inactive threshold %v, want %v", got, InactiveThreshold)
	}
	publish(t, replicas[0], channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{"shared"}})
	m, err := conss[1].Receive(ctx)
	if err != nil {
		t.Fatalf("the replica that kept the subscription received nothing: %v", err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := replicas[1].Remove(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := replicas[1].js.Consumer(ctx, replicas[1].stream, replicas[1].durable("shared")); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("after the last replica removed it, the consumer lookup gave %v, want ErrConsumerNotFound", err)
	}
}
