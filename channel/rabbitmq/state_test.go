package rabbitmq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/rabbitmq"
	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
)

// openState opens a channel of broker ns/broker with prefix and its state store.
func openState(t *testing.T, ctx context.Context, url, prefix string) (*rabbitmq.Channel, channel.StateStore) {
	t.Helper()
	c, err := rabbitmq.New(ctx, "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	st, err := c.StateStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// deleteQueue deletes queue on the node of url.
func deleteQueue(t testing.TB, url, queue string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Fatal(err)
	}
}

// TestStateStoreShared: two channels of one broker (two replicas) share its trigger
// flags on the state stream: a Watch begins with the stored flags and an empty-trigger
// marker, then sees what the other channel sets; Get reads the latest. A channel opened
// afterwards (a restart) reads them too.
func TestStateStoreShared(t *testing.T) {
	url := rabbitmqtest.URL(t)
	prefix := fmt.Sprintf("test-state-%d", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca, a := openState(t, ctx, url, prefix)
	_, b := openState(t, ctx, url, prefix)
	t.Cleanup(func() { deleteQueue(t, url, rabbitmq.StateQueue(ca.Exchange())) })
	if f, err := a.Get(ctx, "ns/t1"); err != nil || f.Paused {
		t.Fatalf("Get on an empty stream: %+v, %v", f, err)
	}
	channeltest.StateStoreShared(t, ctx, a, b)
	_ = ca.Close()
	_, c := openState(t, ctx, url, prefix)
	for _, tc := range []struct {
		trigger string
		paused  bool
	}{{"ns/t1", false}, {"ns/t2", true}} {
		if f, err := c.Get(ctx, tc.trigger); err != nil || f.Paused != tc.paused {
			t.Errorf("after a restart, Get %s: %+v, %v; want paused %v", tc.trigger, f, err, tc.paused)
		}
	}
}

// TestStateStoreForeignMessages: messages of the state stream that sluice did not write
// (another client's, over the bound, not JSON) are skipped, and the flags around them
// still read.
func TestStateStoreForeignMessages(t *testing.T) {
	url := rabbitmqtest.URL(t)
	prefix := fmt.Sprintf("test-state-%d", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, st := openState(t, ctx, url, prefix)
	queue := rabbitmq.StateQueue(c.Exchange())
	t.Cleanup(func() { deleteQueue(t, url, queue) })
	if err := st.Set(ctx, "ns/a", channel.TriggerFlags{Paused: true}); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	big := fmt.Sprintf(`{"trigger":"ns/b","flags":{"paused":true},"x":"%02000d"}`, 0)
	for _, body := range []string{"not json", `{"flags":{"paused":true}}`, `{"trigger":"ns/b","sync":"x"}`, big} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publishing %q: %v, %v", body, ok, err)
		}
	}
	if err := st.Set(ctx, "ns/c", channel.TriggerFlags{Paused: true}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		trigger string
		paused  bool
	}{{"ns/a", true}, {"ns/b", false}, {"ns/c", true}} {
		if f, err := st.Get(ctx, tc.trigger); err != nil || f.Paused != tc.paused {
			t.Errorf("Get %s: %+v, %v; want paused %v", tc.trigger, f, err, tc.paused)
		}
	}
}

// TestStateStoreQueueDeleted: a Set after an operator deleted the state stream declares
// it again and stores the flags; a watch of the deleted stream ends (the broker watches
// again).
func TestStateStoreQueueDeleted(t *testing.T) {
	url := rabbitmqtest.URL(t)
	prefix := fmt.Sprintf("test-state-%d", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, st := openState(t, ctx, url, prefix)
	queue := rabbitmq.StateQueue(c.Exchange())
	t.Cleanup(func() { deleteQueue(t, url, queue) })
	w, err := st.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := <-w; m.Trigger != "" {
		t.Fatalf("first change %+v; want the marker of an empty stream", m)
	}
	deleteQueue(t, url, queue)
	for range w { // ends
	}
	if ctx.Err() != nil {
		t.Fatal("the watch did not end when its stream was deleted")
	}
	if err := st.Set(ctx, "ns/t", channel.TriggerFlags{Paused: true}); err != nil {
		t.Fatal(err)
	}
	if f, err := st.Get(ctx, "ns/t"); err != nil || !f.Paused {
		t.Fatalf("Get after the stream was declared again: %+v, %v", f, err)
	}
}
