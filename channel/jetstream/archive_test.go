package jetstream

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/event"
)

// TestArchiveReplay: with WithRetention every published event is kept in the archive
// after its subscription acknowledged it, and Replay yields those of the window in the
// order they were stored, with their routes; without it, Retention and Replay say the
// channel keeps nothing (channel.ErrNotKept).
func TestArchiveReplay(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	c := newChannel(t, nc, "ns/archived", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 30*time.Second)
	if d, err := c.Retention(ctx); err != nil || d != time.Hour {
		t.Fatalf("Retention: %v, %v; want 1h", d, err)
	}
	k := consume(t, c, "a")
	from := time.Now().Add(-time.Second)
	const n = 20
	for i := range n {
		subs := []string{"a"}
		if i%2 == 1 {
			subs = []string{"a", "b/dead-letter"}
		}
		channeltest.Publish(t, c, subs, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%02d", i), Source: "/s", Type: "t"})
	}
	channeltest.AckAll(t, channeltest.ReceiveN(t, k, n, 10*time.Second))
	to := time.Now().Add(time.Second)
	for _, tt := range []struct {
		name     string
		from, to time.Time
		want     int
	}{
		{"the window", from, to, n},
		{"before", from.Add(-time.Hour), from.Add(-time.Minute), 0},
		{"after", to.Add(time.Minute), to.Add(time.Hour), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ids []string
			for st, err := range c.Replay(ctx, tt.from, tt.to) {
				if err != nil {
					t.Fatal(err)
				}
				var i int
				fmt.Sscanf(st.Event.ID, "e%d", &i)
				want := "a"
				if i%2 == 1 {
					want = "a,b/dead-letter"
				}
				if got := strings.Join(st.Subscriptions, ","); got != want {
					t.Errorf("event %s routed to %q, want %q", st.Event.ID, got, want)
				}
				ids = append(ids, st.Event.ID)
			}
			if len(ids) != tt.want {
				t.Fatalf("replayed %d events, want %d: %v", len(ids), tt.want, ids)
			}
			for i, id := range ids {
				if want := fmt.Sprintf("e%02d", i); id != want {
					t.Fatalf("event %d is %s, want %s", i, id, want)
				}
			}
		})
	}

	plain := newChannel(t, nc, "ns/plain")
	if _, err := plain.Retention(ctx); !errors.Is(err, channel.ErrNotKept) {
		t.Errorf("Retention without an archive: %v, want ErrNotKept", err)
	}
	for _, err := range plain.Replay(ctx, from, to) {
		if !errors.Is(err, channel.ErrNotKept) {
			t.Errorf("Replay without an archive: %v, want ErrNotKept", err)
		}
	}
}

// TestArchiveFetchBytes: one fetch of the archive (replay, catch-up) holds at most
// archiveFetchBytes, however many messages a page allows; a replay still yields every
// event, the largest the server takes included.
func TestArchiveFetchBytes(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc := connect(t, srv)
	c := newChannel(t, nc, "ns/fetch-bytes", WithRetention(time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	from := time.Now()
	const n, size = 160, 64 << 10 // 10 MiB in all, more than one fetch may hold
	for i := 0; i < n; i += 20 {
		envs := make([]channel.Envelope, 0, 20)
		for j := i; j < i+20; j++ {
			envs = append(envs, channel.Envelope{Event: testEvent(j, make([]byte, size)), Subscriptions: []string{"other"}})
		}
		publish(t, c, envs...)
	}
	publish(t, c, channel.Envelope{Event: testEvent(n, make([]byte, nc.MaxPayload()-4<<10)), Subscriptions: []string{"other"}})
	oc, err := c.archiveFrom(ctx, catchUpState{from: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.archiveFetch(oc)
	if err != nil {
		t.Fatal(err)
	}
	got, bytes := 0, 0
	for m := range b.Messages() {
		got++
		bytes += len(m.Data())
	}
	if limit := c.archiveFetchLimit(); got == 0 || bytes > limit {
		t.Errorf("one fetch held %d messages, %d bytes; want at least 1, at most %d bytes", got, bytes, limit)
	}
	replayed := 0
	for _, err := range c.Replay(ctx, from, time.Now().Add(time.Hour)) {
		if err != nil {
			t.Fatal(err)
		}
		replayed++
	}
	if replayed != n+1 {
		t.Errorf("replay yielded %d events, want %d", replayed, n+1)
	}
}
