package jetstream

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/event"
)

// evenOnly is a trigger filter: it accepts the events eNN whose NN is even.
func evenOnly(s channel.Stored) bool {
	i, err := strconv.Atoi(strings.TrimPrefix(s.Event.ID, "e"))
	return err == nil && i%2 == 0
}

// TestConsumeFrom: a subscription new to the channel started at earliest or at a time
// gets, once each, the archived events its filter accepts (routed to others at ingress)
// from there, then the events routed to it; at latest only the latter. Opened again it
// resumes, without a second catch-up. Without an archive starting in the past is refused
// with ErrNotKept.
func TestConsumeFrom(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	c := newChannel(t, nc, "ns/startfrom", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	other := consume(t, c, "other")
	for i := range 10 {
		channeltest.Publish(t, c, []string{"other"}, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%02d", i), Source: "/s", Type: "t"})
	}
	channeltest.AckAll(t, channeltest.ReceiveN(t, other, 10, 20*time.Second))
	time.Sleep(50 * time.Millisecond)
	mid := time.Now()
	time.Sleep(50 * time.Millisecond)
	for i := 10; i < 20; i++ {
		channeltest.Publish(t, c, []string{"other"}, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%02d", i), Source: "/s", Type: "t"})
	}
	channeltest.AckAll(t, channeltest.ReceiveN(t, other, 10, 20*time.Second))
	for _, tt := range []struct {
		name string
		from channel.StartFrom
		want int // stored events it catches up with
	}{
		{"earliest", channel.StartFrom{Earliest: true}, 10},
		{"time", channel.StartFrom{Time: mid}, 5},
		{"latest", channel.StartFrom{}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			from := tt.from
			from.Match = evenOnly
			k, err := c.ConsumeFrom(ctx, "t-"+tt.name, from)
			if err != nil {
				t.Fatal(err)
			}
			channeltest.Publish(t, c, []string{"t-" + tt.name}, &event.Event{SpecVersion: "1.0", ID: "live", Source: "/s", Type: "t"})
			ms := channeltest.ReceiveN(t, k, tt.want+1, 30*time.Second)
			channeltest.AckAll(t, ms)
			var ids []string
			for _, m := range ms {
				ids = append(ids, m.Event().ID)
			}
			slices.Sort(ids)
			if !slices.Contains(ids, "live") || len(slices.Compact(ids)) != tt.want+1 {
				t.Fatalf("got %v, want %d distinct stored events and live", ids, tt.want)
			}
			for _, id := range ids {
				if id != "live" && !evenOnly(channel.Stored{Event: &event.Event{ID: id}}) {
					t.Errorf("got %s, which the filter refuses", id)
				}
				if id != "live" && tt.from.Earliest == false && id < "e10" {
					t.Errorf("got %s, stored before the start time", id)
				}
			}
			channeltest.ExpectNothing(t, k, time.Second)
			_ = k.Close()
			// Opened again: it resumes, with no second catch-up.
			k, err = c.ConsumeFrom(ctx, "t-"+tt.name, from)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			channeltest.ExpectNothing(t, k, 2*time.Second)
		})
	}
	t.Run("no archive", func(t *testing.T) {
		plain := newChannel(t, nc, "ns/plain")
		_, err := plain.ConsumeFrom(ctx, "t", channel.StartFrom{Earliest: true, Match: evenOnly})
		if !errors.Is(err, channel.ErrNotKept) {
			t.Fatalf("ConsumeFrom without an archive: %v, want ErrNotKept", err)
		}
	})
	// A copy under way (recorded in the durable consumer, as a process killed while
	// copying leaves it) goes on from where it was at the next open.
	t.Run("resumes a copy", func(t *testing.T) {
		s, err := c.js.Stream(ctx, c.archive)
		if err != nil {
			t.Fatal(err)
		}
		last := s.CachedInfo().State.LastSeq
		cfg := c.consumerConfig("t-resumed")
		cfg.Metadata[metaCatchUpFrom] = "earliest"
		cfg.Metadata[metaCatchUpNext] = strconv.FormatUint(last-9, 10) // the last 10 events: e10..e19 and the live ones
		cfg.Metadata[metaCatchUpBound] = strconv.FormatUint(last, 10)
		if _, err := c.js.CreateConsumer(ctx, c.stream, cfg); err != nil {
			t.Fatal(err)
		}
		k, err := c.ConsumeFrom(ctx, "t-resumed", channel.StartFrom{Earliest: true, Match: func(channel.Stored) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		channeltest.AckAll(t, channeltest.ReceiveN(t, k, 10, 30*time.Second))
		channeltest.ExpectNothing(t, k, time.Second)
		deadline := time.Now().Add(30 * time.Second)
		for {
			jc, err := c.js.Consumer(ctx, c.stream, c.durable("t-resumed"))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := jc.CachedInfo().Config.Metadata[metaCatchUpBound]; !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the catch-up's state is still recorded after it was delivered")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestRecreatedResumes: on a channel with an archive, a subscription removed and opened
// again at latest gets what it had not settled and, once each, the events stored while
// it was gone that its filter accepts; opened again at earliest it starts anew there.
// Without an archive, Remove deletes it as before.
func TestRecreatedResumes(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	c := newChannel(t, nc, "ns/recreated", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	all := func(channel.Stored) bool { return true }
	pub := func(subs []string, ids ...string) {
		for _, id := range ids {
			channeltest.Publish(t, c, subs, &event.Event{SpecVersion: "1.0", ID: id, Source: "/s", Type: "t"})
		}
	}
	other := consume(t, c, "other")
	k, err := c.ConsumeFrom(ctx, "t", channel.StartFrom{Match: evenOnly})
	if err != nil {
		t.Fatal(err)
	}
	pub([]string{"t"}, "e00", "e01")
	channeltest.AckAll(t, channeltest.ReceiveN(t, k, 1, 20*time.Second)) // e00 settled, e01 not
	pub([]string{"t"}, "e02")
	_ = k.Close()
	if err := c.Remove(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	pub([]string{"other"}, "e03", "e04", "e05", "e06")
	channeltest.AckAll(t, channeltest.ReceiveN(t, other, 4, 20*time.Second))
	k, err = c.ConsumeFrom(ctx, "t", channel.StartFrom{Match: evenOnly})
	if err != nil {
		t.Fatal(err)
	}
	ms := channeltest.ReceiveN(t, k, 4, 30*time.Second)
	channeltest.AckAll(t, ms)
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.Event().ID)
	}
	slices.Sort(ids)
	if want := []string{"e01", "e02", "e04", "e06"}; !slices.Equal(ids, want) {
		t.Fatalf("re-created subscription got %v, want %v", ids, want)
	}
	channeltest.ExpectNothing(t, k, time.Second)
	_ = k.Close()

	// Removed again, re-created at earliest: it starts anew, at the archive's start.
	if err := c.Remove(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	k, err = c.ConsumeFrom(ctx, "t", channel.StartFrom{Earliest: true, Match: all})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ms = channeltest.ReceiveN(t, k, 7, 30*time.Second) // e00..e06, each once
	channeltest.AckAll(t, ms)
	channeltest.ExpectNothing(t, k, time.Second)

	// Removed while the broker had an archive, opened after it lost it: it resumes
	// with its kept events, without a catch-up.
	t.Run("archive gone", func(t *testing.T) {
		k, err := c.ConsumeFrom(ctx, "u", channel.StartFrom{Match: all})
		if err != nil {
			t.Fatal(err)
		}
		pub([]string{"u"}, "u0")
		_ = k.Close()
		if err := c.Remove(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		plain := newChannel(t, nc, "ns/recreated")
		k, err = plain.ConsumeFrom(ctx, "u", channel.StartFrom{Match: all})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		if id := channeltest.ReceiveN(t, k, 1, 30*time.Second)[0].Event().ID; id != "u0" {
			t.Fatalf("got %s, want the kept u0", id)
		}
	})
	t.Run("no archive", func(t *testing.T) {
		plain := newChannel(t, nc, "ns/plain-recreated")
		k := consume(t, plain, "t")
		channeltest.Publish(t, plain, []string{"t"}, &event.Event{SpecVersion: "1.0", ID: "x", Source: "/s", Type: "t"})
		_ = k.Close()
		if err := plain.Remove(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		k = consume(t, plain, "t")
		channeltest.ExpectNothing(t, k, time.Second)
	})
}

// TestCatchUpUntilRouted: a subscription opened with StartFrom.Routed gets the events
// its filter accepts that were stored after it opened and before Routed was closed (the
// broker's routing did not name it yet) and, for routedGrace after, those not routed to
// it (another replica's, routing later), once each, then those routed to it; both new
// at earliest and re-created at latest, even when nothing was stored while it was gone.
func TestCatchUpUntilRouted(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	c := newChannel(t, nc, "ns/routed", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	pub := func(subs []string, ids ...string) {
		for _, id := range ids {
			channeltest.Publish(t, c, subs, &event.Event{SpecVersion: "1.0", ID: id, Source: "/s", Type: "t"})
		}
	}
	other := consume(t, c, "other")
	for _, tt := range []struct {
		name      string
		from      channel.StartFrom
		recreated bool
		want      []string
	}{
		{"new at earliest", channel.StartFrom{Earliest: true}, false, []string{"e00", "e02", "e04", "e06", "live"}},
		{"re-created", channel.StartFrom{}, true, []string{"e02", "e04", "e06", "live"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.ReplaceAll(tt.name, " ", "-")
			if tt.recreated {
				k, err := c.ConsumeFrom(ctx, name, channel.StartFrom{Match: evenOnly})
				if err != nil {
					t.Fatal(err)
				}
				_ = k.Close()
				if err := c.Remove(ctx, name); err != nil {
					t.Fatal(err)
				}
			} else {
				pub([]string{"other"}, "e00", "e01")
				channeltest.AckAll(t, channeltest.ReceiveN(t, other, 2, 20*time.Second))
			}
			routed := make(chan struct{})
			from := tt.from
			from.Match, from.Routed = evenOnly, routed
			k, err := c.ConsumeFrom(ctx, name, from)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			// Stored after the open, routed by a broker whose index does not have it yet.
			pub([]string{"other"}, "e02", "e03", "e04")
			channeltest.AckAll(t, channeltest.ReceiveN(t, other, 3, 20*time.Second))
			close(routed)
			pub([]string{name}, "live")
			// Stored by another replica that takes the change a little later: not routed.
			pub([]string{"other"}, "e06", "e07")
			channeltest.AckAll(t, channeltest.ReceiveN(t, other, 2, 20*time.Second))
			ms := channeltest.ReceiveN(t, k, len(tt.want), 30*time.Second)
			channeltest.AckAll(t, ms)
			var ids []string
			for _, m := range ms {
				ids = append(ids, m.Event().ID)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, tt.want) {
				t.Fatalf("got %v, want %v", ids, tt.want)
			}
			channeltest.ExpectNothing(t, k, time.Second)
		})
	}
}

// TestCatchUpStateRecordedWhole: a replica whose catch-up records its position after
// another replica finished the same catch-up (and removed its state) records the whole
// state again, so that the next open goes on with it instead of failing on half of it.
func TestCatchUpStateRecordedWhole(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	c := newChannel(t, nc, "ns/whole", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	cfg := c.consumerConfig("sub")
	cfg.Metadata[metaCatchUpID] = "x1"
	cfg.Metadata[metaCatchUpFrom] = "earliest"
	cfg.Metadata[metaCatchUpNext] = "0"
	cfg.Metadata[metaCatchUpBound] = "0"
	cfg.Metadata[metaCatchUpOwn] = "0"
	if _, err := c.js.CreateConsumer(ctx, c.stream, cfg); err != nil {
		t.Fatal(err)
	}
	lagging, err := parseCatchUp(cfg.Metadata) // the other replica's copy of the state
	if err != nil {
		t.Fatal(err)
	}
	if err := c.setCatchUp(ctx, "sub", nil); err != nil { // one replica caught up
		t.Fatal(err)
	}
	lagging.bound = 7 // the other one moves its bound when routed
	if err := c.setCatchUp(ctx, "sub", &lagging); err != nil {
		t.Fatal(err)
	}
	k, err := c.ConsumeFrom(ctx, "sub", channel.StartFrom{Earliest: true, Match: func(channel.Stored) bool { return true }})
	if err != nil {
		t.Fatalf("opening the subscription after the lagging replica recorded its position: %v", err)
	}
	_ = k.Close()
}

// BenchmarkCatchUp: a subscription started at earliest receives the b.N events stored
// for another one (copied from the archive, then fetched).
func BenchmarkCatchUp(b *testing.B) {
	srv := startServer(b, b.TempDir())
	nc := connect(b, srv)
	c := newChannel(b, nc, "ns/bench-catchup", WithRetention(time.Hour))
	ctx := channeltest.Ctx(b, 10*time.Minute)
	envs := make([]channel.Envelope, 0, 100)
	for i := 0; i < b.N; i += 100 {
		envs = envs[:0]
		for j := i; j < min(i+100, b.N); j++ {
			envs = append(envs, channel.Envelope{Event: testEvent(j, make([]byte, 1024)), Subscriptions: []string{"other"}})
		}
		publish(b, c, envs...)
	}
	b.ResetTimer()
	k, err := c.ConsumeFrom(ctx, "new", channel.StartFrom{Earliest: true, Match: func(channel.Stored) bool { return true }})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	for range b.N {
		m, err := k.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		_ = m.Ack()
	}
}

// TestRemovedSharedKeptForRetention: on a channel with an archive, a subscription two
// replicas consume, removed from both, is kept for the retention, not only the inactive
// threshold of a subscription kept for other replicas: re-created at latest, it gets the
// events stored while it was gone.
func TestRemovedSharedKeptForRetention(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	const threshold = time.Second
	a := newChannel(t, nc, "ns/shared-removed", WithRetention(24*time.Hour), withInactiveThreshold(threshold))
	b := newChannel(t, nc, "ns/shared-removed", WithRetention(24*time.Hour), withInactiveThreshold(threshold))
	ctx := channeltest.Ctx(t, 60*time.Second)
	all := func(channel.Stored) bool { return true }
	ka, err := a.ConsumeFrom(ctx, "t", channel.StartFrom{Match: all})
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.ConsumeFrom(ctx, "t", channel.StartFrom{Match: all})
	if err != nil {
		t.Fatal(err)
	}
	// Both replicas pull: wait until the server sees a pull request of each.
	deadline := time.Now().Add(30 * time.Second)
	for {
		jc, err := b.js.Consumer(ctx, b.stream, b.durable("t"))
		if err != nil {
			t.Fatal(err)
		}
		if jc.CachedInfo().NumWaiting >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pull requests of both replicas seen")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.Remove(ctx, "t"); err != nil { // b still pulls: kept for it
		t.Fatal(err)
	}
	_ = ka.Close()
	_ = kb.Close()
	if err := b.Remove(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	jc, err := a.js.Consumer(ctx, a.stream, a.durable("t"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := jc.CachedInfo().Config; cfg.InactiveThreshold != 0 || cfg.Metadata[metaRemovedSeq] == "" {
		t.Errorf("removed consumer: inactive threshold %v, removed mark %q; want 0 and a mark", cfg.InactiveThreshold, cfg.Metadata[metaRemovedSeq])
	}
	channeltest.Publish(t, a, []string{"other"}, &event.Event{SpecVersion: "1.0", ID: "gone", Source: "/s", Type: "t"})
	time.Sleep(4 * threshold) // past the threshold: a consumer with one is deleted by now
	k, err := a.ConsumeFrom(ctx, "t", channel.StartFrom{Match: all})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if id := channeltest.ReceiveN(t, k, 1, 30*time.Second)[0].Event().ID; id != "gone" {
		t.Fatalf("re-created subscription got %s, want gone", id)
	}
}

// TestCopyPageEmptyFetch: a fetch of a catch-up that brings nothing ends it only when
// the rest of the archive up to its bound is gone; while it is still stored, the page
// fails (and is tried again) rather than ending the catch-up early.
func TestCopyPageEmptyFetch(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	for _, tt := range []struct {
		name     string
		purge    bool // the archive's messages aged out
		wantDone bool
	}{
		{"rest still stored", false, false},
		{"rest aged out", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newChannel(t, nc, "ns/empty-fetch-"+strings.ReplaceAll(tt.name, " ", "-"), WithRetention(time.Hour))
			ctx := channeltest.Ctx(t, 60*time.Second)
			for i := range 3 {
				channeltest.Publish(t, c, []string{"other"}, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%02d", i), Source: "/s", Type: "t"})
			}
			last, err := c.archiveLast(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tt.purge {
				s, err := c.js.Stream(ctx, c.archive)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Purge(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// A fetch that brings nothing: the archive's consumer starts past its end.
			cu := catchUpState{id: "x", from: "earliest", next: 1, bound: last}
			oc, err := c.archiveFrom(ctx, catchUpState{from: "earliest", next: last + 1})
			if err != nil {
				t.Fatal(err)
			}
			done, err := c.copyPage(ctx, "t", oc, &cu, func(channel.Stored) bool { return true })
			if done != tt.wantDone || (err == nil) != tt.wantDone {
				t.Fatalf("copyPage: done %v, err %v; want done %v", done, err, tt.wantDone)
			}
			if cu.next != 1 {
				t.Errorf("catch-up position moved to %d by an empty fetch", cu.next)
			}
		})
	}
}
