package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// TestDiskHealNotices: only the server's "failed to store" error for lack of space marks
// the disk full; freeBytes reads a real filesystem.
func TestDiskHealNotices(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		full bool
	}{
		{"JetStream failed to store a msg on stream '$G > s': write /d/1.blk: no space left on device", true},
		{"JetStream failed to store a msg on stream '$G > s': permission denied", false},
		{"Error creating stream: no space left on device", false},
	} {
		h := newDiskHeal(nil, t.TempDir(), slog.New(slog.DiscardHandler))
		h.noteError(tt.msg)
		if h.full.Load() != tt.full {
			t.Errorf("%q: full = %v, want %v", tt.msg, h.full.Load(), tt.full)
		}
	}
	if freeBytes(t.TempDir()) <= 0 {
		t.Error("freeBytes of a temp dir is not positive")
	}
	if freeBytes("/nonexistent/dir") != 0 {
		t.Error("freeBytes of a missing dir is not 0")
	}
}

// TestDiskFullFailsFast: while the embedded server's disk is full (marked by the
// server's own error line, as noteError sees it), a channel opened through the Backend
// fails its publishes at once with the reason, storing nothing, counting each in the
// publish errors metric and logging the condition once, not per publish; once
// JetStream is reloaded (what the heal loop does when space is free again) publishes
// are stored and delivered again, and what was stored before is still there.
func TestDiskFullFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	b, err := OpenBackend(ctx, WithDataDir(dir), WithBackendLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		WithChannelOptions(WithRegisterer(reg)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	c, err := b.New(ctx, "ns/disk")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons := consume(t, c, "t")
	env := func(i int) channel.Envelope {
		return channel.Envelope{Event: testEvent(i, []byte("x")), Subscriptions: []string{"t"}}
	}
	publish(t, c, env(1))

	b.emb.heal.noteError("JetStream failed to store a msg on stream '$G > s': write " + dir + "/1.blk: no space left on device")
	if !b.emb.DiskFull() {
		t.Fatal("DiskFull false after the server's out-of-space error")
	}
	const refused = 3
	for range refused - 1 {
		if err := c.Publish(ctx, []channel.Envelope{env(2)}); !errors.Is(err, channel.ErrUnavailable) {
			t.Fatalf("publish with the disk full: %v, want ErrUnavailable", err)
		}
	}
	// At once: without asking the server, so a context already done does not matter.
	done, stop := context.WithCancel(ctx)
	stop()
	err = c.Publish(done, []channel.Envelope{env(2)})
	switch {
	case !errors.Is(err, channel.ErrUnavailable):
		t.Fatalf("publish with the disk full: %v, want ErrUnavailable", err)
	case !strings.Contains(err.Error(), "disk under the embedded server's data directory is full"):
		t.Errorf("publish with the disk full: %q does not say the disk is full", err)
	case strings.Contains(err.Error(), dir):
		t.Errorf("publish with the disk full: %q names the data directory to the client", err)
	}

	want := map[string]float64{`broker="ns/disk",reason="full"`: 0, `broker="ns/disk",reason="too_large"`: 0,
		`broker="ns/disk",reason="unavailable"`: refused}
	if got := sluicetest.Gather(t, reg, "sluice_jetstream_publish_errors_total"); !reflect.DeepEqual(got, want) {
		t.Errorf("publish errors metric: got %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "the disk under the data directory is full"); n != 1 {
		t.Errorf("the disk filling up logged %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "jetstream publish failed") {
		t.Errorf("a publish refused for the full disk was logged on its own:\n%s", logs.String())
	}

	b.emb.heal.reload() // the tempdir has room: what the heal loop does within a second
	if b.emb.DiskFull() {
		t.Fatal("DiskFull still true after JetStream was reloaded")
	}
	publish(t, c, env(3))
	for _, want := range []string{"id-000001", "id-000003"} {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := cons.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("receive %s: %v", want, err)
		}
		if got := m.Event().ID; got != want {
			t.Fatalf("received %s, want %s (the refused event must not be stored)", got, want)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}
