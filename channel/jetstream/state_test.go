package jetstream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
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
	next := func(ch <-chan channel.StateChange) channel.StateChange {
		t.Helper()
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			return c
		case <-ctx.Done():
			t.Fatal("no change within 30s")
		}
		return channel.StateChange{}
	}
	if err := a.Set(ctx, "ns/t1", channel.TriggerFlags{Paused: true}); err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := next(w); c != (channel.StateChange{Trigger: "ns/t1", Flags: channel.TriggerFlags{Paused: true}}) {
		t.Fatalf("first change %+v; want ns/t1 paused", c)
	}
	if c := next(w); c.Trigger != "" {
		t.Fatalf("want the end-of-stored marker, got %+v", c)
	}
	if err := a.Set(ctx, "ns/t1", channel.TriggerFlags{}); err != nil {
		t.Fatal(err)
	}
	if c := next(w); c != (channel.StateChange{Trigger: "ns/t1"}) {
		t.Fatalf("change %+v; want ns/t1 not paused", c)
	}
	if err := b.Set(ctx, "ns/t2", channel.TriggerFlags{Paused: true}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		trigger string
		paused  bool
	}{{"ns/t1", false}, {"ns/t2", true}, {"ns/none", false}} {
		if f, err := a.Get(ctx, tc.trigger); err != nil || f.Paused != tc.paused {
			t.Errorf("Get %s: %+v, %v; want paused %v", tc.trigger, f, err, tc.paused)
		}
	}
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
