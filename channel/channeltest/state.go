package channeltest

import (
	"context"
	"testing"

	"github.com/sluice-broker/sluice/channel"
)

// StateStoreShared checks two channels' state stores of one broker, a and b (two
// replicas): what a sets, b's Watch sees, after first reporting what is stored and an
// empty-trigger marker; what b sets, a's Get reads. It uses triggers "ns/t1", "ns/t2"
// and "ns/none", which must start unset; ctx bounds every wait.
func StateStoreShared(t *testing.T, ctx context.Context, a, b channel.StateStore) {
	t.Helper()
	next := func(ch <-chan channel.StateChange) channel.StateChange {
		t.Helper()
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			return c
		case <-ctx.Done():
			t.Fatal("no change before the test's deadline")
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
}
