package jetstream

import (
	"context"
	"testing"
)

// TestEmbeddedSync: WithSync(SyncAlways) turns on the server's sync_always, the default
// leaves NATS's interval, and a bad value is refused naming the option.
func TestEmbeddedSync(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		sync Sync
		want bool
	}{{"", false}, {SyncInterval, false}, {SyncAlways, true}} {
		e, err := StartEmbedded(ctx, t.TempDir(), WithSync(tt.sync))
		if err != nil {
			t.Fatal(err)
		}
		if got := e.srv.JetStreamConfig().SyncAlways; got != tt.want {
			t.Errorf("WithSync(%q): server sync_always = %v, want %v", tt.sync, got, tt.want)
		}
		if err := e.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := StartEmbedded(ctx, t.TempDir(), WithSync("never")); err == nil {
		t.Error(`WithSync("never") started`)
	}
}
