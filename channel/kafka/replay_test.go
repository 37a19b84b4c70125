package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/event"
)

// TestReplayReadsTheWindow: Replay yields every record stored in [from, to) with its
// routes, whatever was acknowledged, in order per partition key, and nothing of a window
// before them; Retention reads the topic's retention.ms, which WithRetention sets.
func TestReplayReadsTheWindow(t *testing.T) {
	c, _ := newChannel(t, kafka.WithRetention(3*time.Hour))
	ctx := channeltest.Ctx(t, 60*time.Second)
	if d, err := c.Retention(ctx); err != nil || d != 3*time.Hour {
		t.Fatalf("Retention: %v, %v; want 3h", d, err)
	}
	k, err := c.Consume(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Second)
	const n = 50
	for i := range n {
		subs := []string{"a"}
		if i%2 == 1 {
			subs = []string{"a", "b/dead-letter"}
		}
		channeltest.Publish(t, c, subs, ev(fmt.Sprintf("e%02d", i), event.Extension{Name: "partitionkey", Value: "k"}))
	}
	for _, m := range channeltest.ReceiveN(t, k, n, 30*time.Second) {
		_ = m.Ack() // acknowledged: still stored
	}
	to := time.Now().Add(time.Second)
	tests := []struct {
		name     string
		from, to time.Time
		want     int
	}{
		{"the window", from, to, n},
		{"before", from.Add(-time.Hour), from.Add(-time.Minute), 0},
		{"after", to.Add(time.Minute), to.Add(time.Hour), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []string
			for st, err := range c.Replay(ctx, tt.from, tt.to) {
				if err != nil {
					t.Fatal(err)
				}
				if st.Time.Before(tt.from) || !st.Time.Before(tt.to) {
					t.Errorf("event %s stored at %s, outside the window", st.Event.ID, st.Time)
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
				t.Fatalf("replayed %d events, want %d", len(ids), tt.want)
			}
			for i, id := range ids { // one partition key: stored order
				if want := fmt.Sprintf("e%02d", i); id != want {
					t.Fatalf("event %d is %s, want %s", i, id, want)
				}
			}
		})
	}
	// Stopping early stops the read.
	got := 0
	for range c.Replay(ctx, from, to) {
		got++
		if got == 3 {
			break
		}
	}
	if got != 3 {
		t.Errorf("stopped after %d, want 3", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range c.Replay(cctx, from, to) {
		if err == nil {
			t.Fatal("a replay with an ended context yielded an event")
		}
		break
	}
}
