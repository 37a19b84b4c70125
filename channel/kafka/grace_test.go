package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
	"github.com/sluice-broker/sluice/event"
)

// TestGraceEnds: once a catch-up's grace after routing has passed, its bound moves a
// last time, the grace's end is gone, the marker group is deleted once the group's commit
// passed the bound, and a matching record not routed to the subscription is not delivered
// any more, while those routed to it are. The grace is ended by setting its end in the
// past (it lasts routedGrace otherwise).
func TestGraceEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := New(ctx, "ns/broker", WithSeedBrokers(kafkatest.Brokers(t)...), WithTopicPrefix(fmt.Sprintf("test-grace-%d", rand.Uint32())),
		WithPartitions(2), WithCommitInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ev := func(id string) *event.Event {
		return &event.Event{SpecVersion: "1.0", ID: id, Source: "/test", Type: "io.sluice.test"}
	}
	match := func(st channel.Stored) bool { return strings.HasPrefix(st.Event.ID, "m") }
	channeltest.Publish(t, c, []string{"other"}, ev("m0"), ev("x0"))
	routed := make(chan struct{})
	close(routed)
	ck, err := c.ConsumeFrom(ctx, "t", channel.StartFrom{Earliest: true, Match: match, Routed: routed})
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	k := ck.(*consumer)
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("%s: not within the test's time", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	eventually("the grace begins", func() bool { cu := k.catch.Load(); return cu != nil && !cu.grace.IsZero() })
	channeltest.Publish(t, c, []string{"other"}, ev("m1"), ev("x1")) // in the grace
	ms := channeltest.ReceiveN(t, k, 2, 30*time.Second)
	channeltest.AckAll(t, ms)
	if got := ms[0].Event().ID + " " + ms[1].Event().ID; got != "m0 m1" && got != "m1 m0" {
		t.Fatalf("got %s, want m0 and m1", got)
	}

	k.boundMu.Lock()
	cu := k.catch.Load()
	k.catch.Store(&catchUp{bound: cu.bound, low: cu.low, match: cu.match, marker: cu.marker, grace: time.Now().Add(-time.Millisecond)})
	k.boundMu.Unlock()
	eventually("the catch-up ends", func() bool { cu := k.catch.Load(); return cu.grace.IsZero() && cu.done.Load() })
	bound, _, grace, err := c.committedMeta(ctx, c.startGroup("t"))
	if err != nil || bound != nil || !grace.IsZero() {
		t.Fatalf("the marker after the catch-up: %v, %v, %v; want none", bound, grace, err)
	}
	channeltest.Publish(t, c, []string{"other"}, ev("m2"))
	channeltest.Publish(t, c, []string{"t"}, ev("live"))
	if ms := channeltest.ReceiveN(t, k, 1, 30*time.Second); ms[0].Event().ID != "live" {
		t.Fatalf("got %s, want live", ms[0].Event().ID)
	}
	channeltest.ExpectNothing(t, k, 2*time.Second)
}
