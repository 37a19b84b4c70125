package jetstream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
)

// TestStateStoreSharedAndKept: two channels of one broker on one server share its
// trigger flags: what one sets, the other's Get and Watch see; a Watch begins with the
// stored flags and an empty-trigger marker; the flags survive a restart of the server.
func TestStateStoreSharedAndKept(t *testing.T) {
	dir := t.TempDir()
	e := startServer(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(e *Embedded) channel.StateStore {
		t.Helper()
		st, err := newChannel(t, connect(t, e), "ns/b").StateStore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := open(e), open(e)
	channeltest.StateStoreShared(t, ctx, a, b)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := e.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	e2 := startServer(t, dir)
	if f, err := open(e2).Get(ctx, "ns/t2"); err != nil || !f.Paused {
		t.Fatalf("after a restart: %+v, %v; want ns/t2 paused", f, err)
	}
}

// FuzzDecodeState feeds arbitrary values of the state bucket (any process that reaches
// it may write one) to the decoder the watch uses: it never panics, and what it accepts
// names a trigger and encodes back to a value that decodes the same.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"trigger":"ns/t","paused":true}`))
	f.Add([]byte(`{"trigger":"","paused":true}`))
	f.Add([]byte(`{"paused":"yes"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeState(b)
		if err != nil {
			return
		}
		if v.Trigger == "" || len(b) > stateMaxValue {
			t.Fatalf("accepted %q as %+v", b, v)
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := decodeState(enc); err != nil || again != v {
			t.Fatalf("round trip: %+v -> %+v, %v", v, again, err)
		}
	})
}
