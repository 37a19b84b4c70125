package kinesis_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
)

// TestConsumeFromStartsInThePast: a new subscription started at earliest gets the events
// stored before it that its filter accepts (routed elsewhere), one started at a time gets
// those stored from then on, one at latest none of them; all get the events routed to
// them. The catch-up survives a restart: the subscription re-opened at latest goes on with
// it from its checkpoint.
func TestConsumeFromStartsInThePast(t *testing.T) {
	key, dir := uniqueKey(t), t.TempDir()
	c := newChannel(t, key, dir, kinesis.WithShards(1))
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("o", 4)...)
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("x", 2)...)
	time.Sleep(1100 * time.Millisecond) // a second apart: the time start falls between
	mid := time.Now()
	time.Sleep(1100 * time.Millisecond)
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("m", 2)...)
	match := func(s channel.Stored) bool { return !strings.HasPrefix(s.Event.ID, "x") }

	tests := []struct {
		name string
		from channel.StartFrom
		want string
	}{
		{"late", channel.StartFrom{Earliest: true}, "m0 m1 n0 o0 o1 o2 o3"},
		{"timed", channel.StartFrom{Time: mid}, "m0 m1 n0"},
		{"plain", channel.StartFrom{}, "n0"},
	}
	ks := map[string]channel.Consumer{}
	for _, tt := range tests {
		tt.from.Match = match
		k, err := c.ConsumeFrom(channeltest.Ctx(t, 20*time.Second), tt.name, tt.from)
		if err != nil {
			t.Fatalf("ConsumeFrom(%s): %v", tt.name, err)
		}
		ks[tt.name] = k
	}
	channeltest.Publish(t, c, []string{"late", "timed", "plain"}, channeltest.Events("n", 1)...)
	var kept []channel.Message
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := strings.Fields(tt.want)
			ms := channeltest.ReceiveN(t, ks[tt.name], len(want), 30*time.Second)
			channeltest.ExpectNothing(t, ks[tt.name], time.Second)
			var got []string
			for _, m := range ms {
				got = append(got, m.Event().ID)
			}
			sort.Strings(got)
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("got %v, want %s", got, tt.want)
			}
			if tt.name == "late" { // ack the first two; the rest come again after a restart
				channeltest.AckAll(t, ms[:2])
				kept = ms[2:]
				return
			}
			channeltest.AckAll(t, ms)
		})
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = newChannel(t, key, dir, kinesis.WithShards(1))
	defer c.Close()
	k, err := c.ConsumeFrom(channeltest.Ctx(t, 20*time.Second), "late", channel.StartFrom{Match: match})
	if err != nil {
		t.Fatal(err)
	}
	ms := channeltest.ReceiveN(t, k, len(kept), 30*time.Second)
	channeltest.ExpectNothing(t, k, time.Second)
	for i, m := range ms {
		if m.Event().ID != kept[i].Event().ID {
			t.Fatalf("after the restart message %d is %s, want %s", i, m.Event().ID, kept[i].Event().ID)
		}
	}
}
