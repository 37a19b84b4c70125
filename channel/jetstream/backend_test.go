package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
)

func TestBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := t.TempDir()

	if _, err := OpenBackend(ctx); err == nil || !strings.Contains(err.Error(), "data directory") {
		t.Fatalf("no server configured: got %v", err)
	}
	if _, err := OpenBackend(ctx, WithDataDir(dir), WithURL("nats://127.0.0.1:1")); err == nil {
		t.Fatal("both data dir and URL accepted")
	}
	if _, err := OpenBackend(ctx, WithURL("nats://127.0.0.1:1")); err == nil {
		t.Fatal("connecting to a closed port succeeded")
	}

	// Embedded server shared by two brokers; then the same data over the network.
	emb, err := OpenBackend(ctx, WithDataDir(dir), WithBackendLogger(testLogger(t)),
		WithEmbeddedOptions(WithListen("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close(ctx)
	a, err := emb.New(ctx, "ns/a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bb, err := emb.New(ctx, "ns/b")
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	if a.Stream() == bb.Stream() {
		t.Fatalf("two brokers share stream %s", a.Stream())
	}
	publish(t, a, channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{"t"}})

	ext, err := OpenBackend(ctx, WithURL(emb.emb.ClientURL()), WithBackendLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close(ctx)
	a2, err := ext.New(ctx, "ns/a")
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	cons, err := a2.Consume(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	m := channeltest.ReceiveN(t, cons, 1, 5*time.Second)[0]
	if m.Event().ID != "id-000001" {
		t.Fatalf("got %s", m.Event().ID)
	}
	_ = m.Ack()
}
