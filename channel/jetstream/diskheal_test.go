package jetstream

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
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
// fails its publishes at once with the reason, storing nothing; once JetStream is
// reloaded (what the heal loop does when space is free again) publishes are stored and
// delivered again, and what was stored before is still there.
func TestDiskFullFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	b, err := OpenBackend(ctx, WithDataDir(dir), WithBackendLogger(testLogger(t)))
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
	start := time.Now()
	err = c.Publish(ctx, []channel.Envelope{env(2)})
	took := time.Since(start)
	switch {
	case !errors.Is(err, channel.ErrUnavailable):
		t.Fatalf("publish with the disk full: %v, want ErrUnavailable", err)
	case !strings.Contains(err.Error(), "disk under the embedded server's data directory is full"):
		t.Errorf("publish with the disk full: %q does not say the disk is full", err)
	case strings.Contains(err.Error(), dir):
		t.Errorf("publish with the disk full: %q names the data directory to the client", err)
	case took > 100*time.Millisecond:
		t.Errorf("publish with the disk full took %v, want at once", took)
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
