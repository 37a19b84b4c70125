package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// startServer starts an embedded server on dir and shuts it down at the end of the test.
func startServer(t testing.TB, dir string, opts ...EmbeddedOption) *Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := StartEmbedded(ctx, dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return e
}

func connect(t testing.TB, e *Embedded) *nats.Conn {
	t.Helper()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func newChannel(t testing.TB, nc *nats.Conn, key string, opts ...Option) *Channel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts = append([]Option{WithLogger(testLogger(t))}, opts...)
	c, err := New(ctx, nc, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func consume(t testing.TB, c *Channel, name string) channel.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := c.Consume(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cons.Close() })
	return cons
}

func testEvent(i int, data []byte) *event.Event {
	return &event.Event{
		SpecVersion: "1.0",
		ID:          fmt.Sprintf("id-%06d", i),
		Source:      "/test",
		Type:        "io.sluice.test",
		Data:        data,
	}
}

func publish(t testing.TB, c *Channel, envs ...channel.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
}

// testLogger logs through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
