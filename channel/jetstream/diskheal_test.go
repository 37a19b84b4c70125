package jetstream

import (
	"log/slog"
	"testing"
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
