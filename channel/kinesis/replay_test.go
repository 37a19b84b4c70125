package kinesis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/event"
)

// TestReplayReadsTheWindow: Replay yields every event stored in [from, to) with its
// routes, acknowledged or not, in order per partition key, and none of a window before
// or after them; Retention is the stream's retention period (24h by default).
func TestReplayReadsTheWindow(t *testing.T) {
	c := newChannel(t, uniqueKey(t), t.TempDir(), kinesis.WithShards(2))
	defer c.Close()
	ctx := channeltest.Ctx(t, 60*time.Second)
	if d, err := c.Retention(ctx); err != nil || d < 24*time.Hour {
		t.Fatalf("Retention: %v, %v; want at least 24h", d, err)
	}
	k := channeltest.Consume(t, c, "a")
	from := time.Now().Add(-2 * time.Second)
	const n = 30
	for i := range n {
		subs := []string{"a"}
		if i%2 == 1 {
			subs = append(subs, "b/dead-letter")
		}
		channeltest.Publish(t, c, subs, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("e%02d", i), Source: "/s", Type: "t",
			Extensions: []event.Extension{{Name: "partitionkey", Value: "k"}}})
	}
	channeltest.AckAll(t, channeltest.ReceiveN(t, k, n, 30*time.Second))
	to := time.Now().Add(2 * time.Second)
	tests := []struct {
		name     string
		from, to time.Time
		want     int
	}{
		{"the window", from, to, n},
		{"before", from.Add(-time.Hour), from.Add(-time.Minute), 0},
	}
	for _, tt := range tests {
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
}

// TestWithRetentionRaisesThePeriod: WithRetention(30h) makes New raise a new stream's
// retention period from 24h to 30h (rounded up to whole hours).
func TestWithRetentionRaisesThePeriod(t *testing.T) {
	c := newChannel(t, uniqueKey(t), t.TempDir(), kinesis.WithShards(1), kinesis.WithRetention(29*time.Hour+time.Minute))
	defer c.Close()
	if d, err := c.Retention(channeltest.Ctx(t, 20*time.Second)); err != nil || d != 30*time.Hour {
		t.Fatalf("Retention: %v, %v; want 30h", d, err)
	}
}
