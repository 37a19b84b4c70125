package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
)

// TestStateStoreShared: two channels of one broker share its trigger flags on the
// compacted state topic: a Watch begins with the stored flags and an empty-trigger
// marker, then sees what the other channel sets; Get reads the latest.
func TestStateStoreShared(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := fmt.Sprintf("test-state-%d", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func() channel.StateStore {
		t.Helper()
		c, err := kafka.New(ctx, "ns/broker", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(prefix), kafka.WithPartitions(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.StateStore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := open(), open()
	next := func(ch <-chan channel.StateChange) channel.StateChange {
		t.Helper()
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			return c
		case <-ctx.Done():
			t.Fatal("no change within 60s")
		}
		return channel.StateChange{}
	}
	if f, err := a.Get(ctx, "ns/t1"); err != nil || f.Paused {
		t.Fatalf("Get on an empty topic: %+v, %v", f, err)
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
