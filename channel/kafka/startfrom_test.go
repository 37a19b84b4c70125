package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/event"
)

// evenIDs is the Match of the tests below: events "eN" with an even N that were not only
// dead-lettered.
func evenIDs(st channel.Stored) bool {
	if len(st.Subscriptions) == 1 && strings.HasSuffix(st.Subscriptions[0], "/dead-letter") {
		return false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(st.Event.ID, "e"))
	return err == nil && n%2 == 0
}

// receiveIDs acknowledges what k hands out until every id of want came, failing on an id
// not in allowed; deliveries are at-least-once, so an allowed id may come twice. It then
// keeps taking messages for settle, failing on any id not in allowed.
func receiveIDs(t *testing.T, k channel.Consumer, settle time.Duration, allowed []string, want ...string) {
	t.Helper()
	exp := map[string]bool{}
	for _, id := range allowed {
		exp[id] = true
	}
	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !hasAll(seen, want) {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatalf("got %v of %v: %v", seen, want, err)
		}
		id := m.Event().ID
		_ = m.Ack()
		if !exp[id] {
			t.Fatalf("got %s, not among %v", id, allowed)
		}
		seen[id] = true
	}
	sctx, scancel := context.WithTimeout(context.Background(), settle)
	defer scancel()
	for {
		m, err := k.Receive(sctx)
		if err != nil {
			return
		}
		_ = m.Ack()
		if id := m.Event().ID; !exp[id] {
			t.Fatalf("then got %s, not among %v", id, allowed)
		}
	}
}

func hasAll(seen map[string]bool, want []string) bool {
	for _, id := range want {
		if !seen[id] {
			return false
		}
	}
	return true
}

// TestConsumeFromCatchesUp: a subscription new to the channel opened with ConsumeFrom
// earliest gets the stored events Match accepts (routed elsewhere before it existed),
// then the events routed to it; closed halfway through its catch-up and opened again
// (a restart), it goes on with what it had not acknowledged; a time start skips what was
// stored before; a subscription that exists resumes without a catch-up.
func TestConsumeFromCatchesUp(t *testing.T) {
	c, _ := newChannel(t)
	ctx := channeltest.Ctx(t, 90*time.Second)
	for i := range 10 {
		channeltest.Publish(t, c, []string{"other"}, ev(fmt.Sprintf("e%d", i)))
	}
	channeltest.Publish(t, c, []string{"other/dead-letter"}, ev("e20")) // a dead letter: not the new one's
	time.Sleep(20 * time.Millisecond)                                   // the records before mid have an earlier timestamp (whole ms)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond) // the records after mid have a later timestamp
	channeltest.Publish(t, c, []string{"other"}, ev("e10"), ev("e11"))

	from := channel.StartFrom{Earliest: true, Match: evenIDs}
	k, err := c.ConsumeFrom(ctx, "new", from)
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"new"}, ev("live1"))
	channeltest.Publish(t, c, []string{"other"}, ev("e12")) // after it exists: routing decides
	wantNew := []string{"e0", "e2", "e4", "e6", "e8", "e10", "live1"}
	first := channeltest.ReceiveN(t, k, 3, 30*time.Second)
	for _, m := range first {
		if id := m.Event().ID; !strings.Contains(" "+strings.Join(wantNew, " ")+" ", " "+id+" ") {
			t.Fatalf("got %s, not among %v", id, wantNew)
		}
	}
	channeltest.AckAll(t, first)
	if err := k.Close(); err != nil { // a restart before the catch-up is over
		t.Fatal(err)
	}
	k, err = c.ConsumeFrom(ctx, "new", from)
	if err != nil {
		t.Fatal(err)
	}
	// What the first three were not: the rest comes after the restart (and perhaps some
	// of those again, at-least-once).
	got := map[string]bool{}
	for _, m := range first {
		got[m.Event().ID] = true
	}
	var rest []string
	for _, id := range wantNew {
		if !got[id] {
			rest = append(rest, id)
		}
	}
	receiveIDs(t, k, time.Second, wantNew, rest...)
	_ = k.Close()

	// A time start: only what was stored at or after it.
	kt, err := c.ConsumeFrom(ctx, "timed", channel.StartFrom{Time: mid, Match: evenIDs})
	if err != nil {
		t.Fatal(err)
	}
	receiveIDs(t, kt, time.Second, []string{"e10", "e12"}, "e10", "e12")
	_ = kt.Close()

	// It exists now: opened again from earliest, it resumes (nothing more).
	kt, err = c.ConsumeFrom(ctx, "timed", channel.StartFrom{Earliest: true, Match: evenIDs})
	if err != nil {
		t.Fatal(err)
	}
	channeltest.ExpectNothing(t, kt, 2*time.Second)
	_ = kt.Close()
}

// TestRecreatedResumes: a subscription removed and opened again with the same name
// resumes where it stopped: it gets the events Match accepts that were stored while it
// was gone, and nothing it had acknowledged; re-created with a start of earliest, it
// starts there instead.
func TestRecreatedResumes(t *testing.T) {
	c, _ := newChannel(t)
	ctx := channeltest.Ctx(t, 90*time.Second)
	latest := channel.StartFrom{Match: evenIDs}
	k, err := c.ConsumeFrom(ctx, "re", latest)
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"re"}, ev("e0"), ev("e1"))
	channeltest.AckAll(t, channeltest.ReceiveN(t, k, 2, 30*time.Second))
	if err := c.Remove(ctx, "re"); err != nil { // closes k, committing
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"other"}, ev("e2"), ev("e3"), ev("e4")) // while it is gone

	k, err = c.ConsumeFrom(ctx, "re", latest)
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"re"}, ev("e5"))
	receiveIDs(t, k, time.Second, []string{"e2", "e4", "e5"}, "e2", "e4", "e5")
	if err := c.Remove(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	k, err = c.ConsumeFrom(ctx, "re", channel.StartFrom{Earliest: true, Match: evenIDs})
	if err != nil {
		t.Fatal(err)
	}
	receiveIDs(t, k, time.Second, []string{"e0", "e1", "e2", "e4", "e5"}, "e0", "e1", "e2", "e4", "e5") // its own (routed) ones again, and the matching others
}

// TestConsumeFromUnreachable: with the cluster unreachable, ConsumeFrom latest opens the
// subscription as Consume does (a broker may start before Kafka), while a start in the
// past fails with ErrUnavailable, within the start bound.
func TestConsumeFromUnreachable(t *testing.T) {
	c, err := kafka.New(channeltest.Ctx(t, 5*time.Second), "ns/down", kafka.WithSeedBrokers(refusedAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := channeltest.Ctx(t, 60*time.Second)
	k, err := c.ConsumeFrom(ctx, "latest", channel.StartFrom{Match: evenIDs})
	if err != nil {
		t.Fatalf("ConsumeFrom latest on an unreachable cluster: %v", err)
	}
	_ = k.Close()
	if _, err := c.ConsumeFrom(ctx, "earliest", channel.StartFrom{Earliest: true, Match: evenIDs}); !errors.Is(err, channel.ErrUnavailable) {
		t.Fatalf("ConsumeFrom earliest on an unreachable cluster: %v, want ErrUnavailable", err)
	}
}

// TestRecreatedBeforeCommit: a subscription removed before its group committed anything,
// then re-created from latest, gets the events its filter matches that were stored while
// it was gone, and not those stored before (nor while it existed, routed elsewhere).
func TestRecreatedBeforeCommit(t *testing.T) {
	c, _ := newChannel(t)
	ctx := channeltest.Ctx(t, 90*time.Second)
	channeltest.Publish(t, c, []string{"other"}, ev("e0"), ev("e2"))
	latest := channel.StartFrom{Match: evenIDs}
	if _, err := c.ConsumeFrom(ctx, "t", latest); err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"other"}, ev("e4")) // while it exists: routing decides
	if err := c.Remove(ctx, "t"); err != nil {             // before any commit
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"other"}, ev("e6"), ev("e7")) // while it is gone
	k, err := c.ConsumeFrom(ctx, "t", latest)
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"t"}, ev("e9"))
	receiveIDs(t, k, 2*time.Second, []string{"e6", "e9"}, "e6", "e9")
}

// TestConsumeFromLatestNeedsNoAnswer: ConsumeFrom latest does not ask the cluster in the
// call (the broker opens its triggers one after another, under its lock): on a cluster
// that accepts connections and never answers it returns; with its context already ended
// (no answer in time), a re-created subscription still catches up with the events stored
// while it was gone, looked for by its consumer.
func TestConsumeFromLatestNeedsNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open and silent until ln closes
		}
	}()
	silent, err := kafka.New(channeltest.Ctx(t, 5*time.Second), "ns/silent", kafka.WithSeedBrokers(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := silent.ConsumeFrom(channeltest.Ctx(t, 60*time.Second), fmt.Sprintf("t%d", i), channel.StartFrom{Match: evenIDs}); err != nil {
			t.Fatalf("ConsumeFrom latest on a silent cluster: %v", err)
		}
	}
	_ = silent.Close()

	c, _ := newChannel(t)
	ctx := channeltest.Ctx(t, 90*time.Second)
	latest := channel.StartFrom{Match: evenIDs}
	k, err := c.ConsumeFrom(ctx, "re", latest)
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"re"}, ev("e0"))
	channeltest.AckAll(t, channeltest.ReceiveN(t, k, 1, 30*time.Second))
	if err := c.Remove(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"other"}, ev("e2"), ev("e3")) // while it is gone
	ended, cancel := context.WithCancel(ctx)
	cancel()
	k, err = c.ConsumeFrom(ended, "re", latest)
	if err != nil {
		t.Fatal(err)
	}
	receiveIDs(t, k, time.Second, []string{"e2"}, "e2")
}

// TestCatchUpUntilRouted: a subscription opened with StartFrom.Routed gets the events
// Match accepts that were stored after its catch-up's bound was taken and before Routed
// was closed (the broker's routing did not name it yet) and, in the grace after, those
// not routed to it (another replica's, routing later), then those routed to it; both
// new at earliest and re-created at latest, even when nothing was stored while it was
// gone; and, closed once routed and opened again without Routed (a restart), from the
// bound and grace recorded at routing. Each waits until its consumer joined its group
// (for the re-created one, its catch-up was resolved then) before those events are stored.
func TestCatchUpUntilRouted(t *testing.T) {
	ctx := channeltest.Ctx(t, 180*time.Second)
	for _, tt := range []struct {
		name      string
		from      channel.StartFrom
		recreated bool
		restart   bool
		want      []string
	}{
		{"new at earliest", channel.StartFrom{Earliest: true}, false, false, []string{"e00", "e02", "e04", "e06", "live"}},
		{"re-created", channel.StartFrom{}, true, false, []string{"e02", "e04", "e06", "live"}},
		{"restarted after routing", channel.StartFrom{Earliest: true}, false, true, []string{"e00", "e02", "e04", "e06", "live"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newChannel(t) // a topic of its own: the ids are the same in each
			name := strings.ReplaceAll(tt.name, " ", "-")
			if tt.recreated {
				k, err := c.ConsumeFrom(ctx, name, channel.StartFrom{Match: evenIDs})
				if err != nil {
					t.Fatal(err)
				}
				waitJoined(t, k)
				_ = k.Close()
				if err := c.Remove(ctx, name); err != nil {
					t.Fatal(err)
				}
			} else {
				channeltest.Publish(t, c, []string{"other"}, ev("e00"), ev("e01"))
			}
			routed := make(chan struct{})
			from := tt.from
			from.Match, from.Routed = evenIDs, routed
			k, err := c.ConsumeFrom(ctx, name, from)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			waitJoined(t, k)
			// Stored after the open, routed by a broker whose index does not have it yet.
			channeltest.Publish(t, c, []string{"other"}, ev("e02"), ev("e03"), ev("e04"))
			close(routed)
			channeltest.Publish(t, c, []string{name}, ev("live"))
			// e02 or e04 handed out: the bound moved at routing (and was recorded).
			taken := receiveAny(t, k, "e02", "e04")
			want := tt.want
			if !tt.restart {
				channeltest.AckAll(t, taken)
				want = slices.DeleteFunc(slices.Clone(want), func(id string) bool {
					return slices.ContainsFunc(taken, func(m channel.Message) bool { return m.Event().ID == id })
				})
			} else { // nothing acknowledged: it all comes again, from the marker's bound
				if err := k.Close(); err != nil {
					t.Fatal(err)
				}
				from.Routed = nil
				if k, err = c.ConsumeFrom(ctx, name, from); err != nil {
					t.Fatal(err)
				}
				defer k.Close()
			}
			// Stored by another replica that takes the change a little later: not routed.
			channeltest.Publish(t, c, []string{"other"}, ev("e06"), ev("e07"))
			receiveIDs(t, k, 2*time.Second, tt.want, want...)
		})
	}
}

// receiveAny takes what k hands out, without settling it, until one of ids comes, and
// returns what it took.
func receiveAny(t *testing.T, k channel.Consumer, ids ...string) []channel.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ms []channel.Message
	for {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatalf("none of %v came: %v", ids, err)
		}
		ms = append(ms, m)
		if slices.Contains(ids, m.Event().ID) {
			return ms
		}
	}
}

// waitJoined waits until k joined its group (channel.Joiner).
func waitJoined(t *testing.T, k channel.Consumer) {
	t.Helper()
	j, ok := k.(channel.Joiner)
	if !ok {
		t.Fatalf("%T is no channel.Joiner", k)
	}
	for deadline := time.Now().Add(30 * time.Second); !j.Joined(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the consumer did not join its group in 30s")
		}
	}
}

// TestCatchUpReplicasRouteApart is the review's scenario: two replicas of a broker open a
// new subscription at earliest; one routes to it; the other, whose routing does not have
// it yet, stores events its filter accepts without routing them to it, then routes to it
// a little later. The subscription gets those too, whichever replica owns their partition
// (before the grace, those on the first replica's partitions were lost).
func TestCatchUpReplicasRouteApart(t *testing.T) {
	prefix := fmt.Sprintf("test-replicas-%d", rand.Uint32())
	a, _ := newChannel(t, kafka.WithTopicPrefix(prefix))
	b, _ := newChannel(t, kafka.WithTopicPrefix(prefix))
	ctx := channeltest.Ctx(t, 120*time.Second)
	channeltest.Publish(t, a, []string{"other"}, ev("e00"), ev("e01"))
	routedA, routedB := make(chan struct{}), make(chan struct{})
	var ks []channel.Consumer
	for _, r := range []struct {
		c      *kafka.Channel
		routed chan struct{}
	}{{a, routedA}, {b, routedB}} {
		k, err := r.c.ConsumeFrom(ctx, "t", channel.StartFrom{Earliest: true, Match: evenIDs, Routed: r.routed})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		ks = append(ks, k)
	}
	waitJoined(t, ks[0])
	waitJoined(t, ks[1])
	close(routedA)
	time.Sleep(2 * time.Second) // a moves its bound at routing meanwhile (not needed to pass)
	// Stored by b before it routes to the subscription: not routed to it; a key each,
	// so that both replicas' partitions have some.
	want := []string{"e00", "live"}
	var evs []*event.Event
	for i := 2; i < 34; i++ {
		id := fmt.Sprintf("e%02d", i)
		evs = append(evs, ev(id, event.Extension{Name: "partitionkey", Value: "k" + id}))
		if i%2 == 0 {
			want = append(want, id)
		}
	}
	channeltest.Publish(t, b, []string{"other"}, evs...)
	close(routedB)
	channeltest.Publish(t, b, []string{"t"}, ev("live"))

	got := make(chan string)
	for _, k := range ks {
		go func() {
			for {
				m, err := k.Receive(ctx)
				if err != nil {
					return
				}
				_ = m.Ack()
				select {
				case got <- m.Event().ID:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	seen := map[string]bool{}
	for !hasAll(seen, want) {
		select {
		case id := <-got:
			if !slices.Contains(want, id) {
				t.Fatalf("got %s, not among %v", id, want)
			}
			seen[id] = true
		case <-ctx.Done():
			t.Fatalf("got %v of %v", seen, want)
		}
	}
}
