package kinesis_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/event"
)

// catchUpMargin is how long past its start a catch-up runs the filter (startMargin)
// plus a little: a record that arrives that long after the open is past the end the
// catch-up had at the open.
const catchUpMargin = time.Minute + 3*time.Second

// TestCatchUpUntilRouted: a subscription opened with StartFrom.Routed gets the events its
// filter accepts that were stored after it opened, past the end its catch-up had then,
// and before Routed was closed (the broker's routing did not name it yet), once each,
// then those routed to it: new at earliest, re-created at latest after Remove, and
// re-opened by a process restarted before its routing (it waits for the new Routed);
// with checkpoint files and with a lease table. The new end is recorded: opened again
// after a restart without Routed, it gets the same events (none acknowledged).
func TestCatchUpUntilRouted(t *testing.T) {
	even := func(s channel.Stored) bool { return !strings.ContainsAny(s.Event.ID[len(s.Event.ID)-1:], "13579") }
	backends := []struct {
		name string
		// open returns an opener of a stream of its own, called again after each restart.
		open func(t *testing.T) func() *kinesis.Channel
	}{
		{"files", func(t *testing.T) func() *kinesis.Channel {
			key, dir := uniqueKey(t), t.TempDir()
			return func() *kinesis.Channel { return newChannel(t, key, dir, kinesis.WithShards(1)) }
		}},
		{"lease table", func(t *testing.T) func() *kinesis.Channel {
			key, table := uniqueKey(t), leaseTableName()
			// Leases long enough that a stall of the loaded machine does not lose one: a
			// lease lost and taken again delivers its unacknowledged records twice.
			return func() *kinesis.Channel {
				return newLeased(t, key, table, kinesis.WithShards(1), kinesis.WithLeaseDuration(20*time.Second))
			}
		}},
	}
	tests := []struct {
		name      string
		from      channel.StartFrom
		before    string // published for another subscription before the open
		recreated bool   // opened at latest and removed first
		restarted bool   // opened first by a process stopped before its routing
		want      string
	}{
		{name: "new at earliest", from: channel.StartFrom{Earliest: true}, before: "e00 e01", want: "e00 e02 e04 live"},
		{name: "re-created", recreated: true, want: "e02 e04 live"},
		{name: "restarted before routed", from: channel.StartFrom{Earliest: true}, before: "e00 e01", restarted: true, want: "e00 e02 e04 live"},
	}
	pub := func(t *testing.T, c *kinesis.Channel, sub, ids string) {
		for _, id := range strings.Fields(ids) {
			channeltest.Publish(t, c, []string{sub}, &event.Event{SpecVersion: "1.0", ID: id, Source: "/s", Type: "t"})
		}
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := channeltest.Ctx(t, 5*time.Minute)
			type run struct {
				open   func() *kinesis.Channel
				c      *kinesis.Channel
				routed chan struct{}
			}
			runs := make([]run, len(tests))
			for i, tt := range tests {
				r := run{open: b.open(t), routed: make(chan struct{})}
				r.c = r.open()
				pub(t, r.c, "other", tt.before)
				if tt.recreated {
					k, err := r.c.ConsumeFrom(ctx, "sub", channel.StartFrom{Match: even})
					if err != nil {
						t.Fatal(err)
					}
					_ = k.Close()
					if err := r.c.Remove(ctx, "sub"); err != nil {
						t.Fatal(err)
					}
				}
				from := tt.from
				from.Match, from.Routed = even, r.routed
				if tt.restarted {
					from.Routed = make(chan struct{}) // never closed: the process stops first
				}
				if _, err := r.c.ConsumeFrom(ctx, "sub", from); err != nil {
					t.Fatal(err)
				}
				runs[i] = r
			}
			// Past the end each catch-up had at its open: only Routed moves it further.
			time.Sleep(catchUpMargin)
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					r := runs[i]
					defer func() { _ = r.c.Close() }()
					// Stored after the open, routed by a broker whose index does not have it yet.
					pub(t, r.c, "other", "e02 e03 e04")
					from := tt.from
					from.Match, from.Routed = even, r.routed
					if tt.restarted {
						_ = r.c.Close()
						r.c = r.open()
					}
					k, err := r.c.ConsumeFrom(ctx, "sub", from)
					if err != nil {
						t.Fatal(err)
					}
					close(r.routed)
					pub(t, r.c, "sub", "live")
					if got := ids(channeltest.ReceiveN(t, k, len(strings.Fields(tt.want)), 30*time.Second)); got != tt.want {
						t.Fatalf("got %s, want %s", got, tt.want)
					}
					// Nothing acknowledged: after a restart, opened without Routed, it gets
					// them again from where its catch-up's end was recorded.
					_ = r.c.Close()
					r.c = r.open()
					from.Routed = nil
					if k, err = r.c.ConsumeFrom(ctx, "sub", from); err != nil {
						t.Fatal(err)
					}
					ms := channeltest.ReceiveN(t, k, len(strings.Fields(tt.want)), 30*time.Second)
					channeltest.AckAll(t, ms)
					if got := ids(ms); got != tt.want {
						t.Fatalf("after a restart got %s, want %s", got, tt.want)
					}
					channeltest.ExpectNothing(t, k, time.Second)
				})
			}
		})
	}
}

// ids returns the sorted ids of ms, joined by spaces.
func ids(ms []channel.Message) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Event().ID)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}
