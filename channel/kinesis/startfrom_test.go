package kinesis_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
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

// TestRecreatedSubscriptionResumes: a subscription removed and opened again with its
// name resumes where it stopped: what it had not acknowledged comes again, with the
// events its filter accepts that were stored while it was gone (routed elsewhere), and
// none it acknowledged; re-created at earliest it starts there instead.
func TestRecreatedSubscriptionResumes(t *testing.T) {
	match := func(s channel.Stored) bool { return !strings.HasPrefix(s.Event.ID, "x") }
	tests := []struct {
		name string
		from channel.StartFrom
		want string
	}{
		{"at latest", channel.StartFrom{}, "g0 g1 u0 u1"},
		{"at earliest", channel.StartFrom{Earliest: true}, "a0 a1 g0 g1 u0 u1"},
	}
	opens := []struct {
		name string
		open func(t *testing.T) *kinesis.Channel
	}{
		{"files", func(t *testing.T) *kinesis.Channel {
			return newChannel(t, uniqueKey(t), t.TempDir(), kinesis.WithShards(1))
		}},
		{"lease table", func(t *testing.T) *kinesis.Channel {
			return newLeased(t, uniqueKey(t), leaseTableName(), kinesis.WithShards(1))
		}},
	}
	for _, o := range opens {
		for _, tt := range tests {
			t.Run(o.name+"/"+tt.name, func(t *testing.T) {
				testRecreated(t, o.open(t), match, tt.from, tt.want)
			})
		}
	}
}

// testRecreated: on c, a subscription removed with events unacknowledged and opened again
// from from gets want (sorted ids).
func testRecreated(t *testing.T, c *kinesis.Channel, match func(channel.Stored) bool, from channel.StartFrom, want string) {
	defer c.Close()
	ctx := channeltest.Ctx(t, 60*time.Second)
	k, err := c.ConsumeFrom(ctx, "sub", channel.StartFrom{Match: match})
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Events("a", 2)...)
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Events("u", 2)...)
	ms := channeltest.ReceiveN(t, k, 4, 30*time.Second)
	channeltest.AckAll(t, ms[:2]) // a0 a1 acknowledged, u0 u1 not
	if err := c.Remove(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("g", 2)...)
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("x", 2)...)
	from.Match = match
	if k, err = c.ConsumeFrom(ctx, "sub", from); err != nil {
		t.Fatal(err)
	}
	ms = channeltest.ReceiveN(t, k, len(strings.Fields(want)), 30*time.Second)
	channeltest.ExpectNothing(t, k, time.Second)
	var got []string
	for _, m := range ms {
		got = append(got, m.Event().ID)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
}

// TestRemoveSweepsExpiredCheckpoints: Remove deletes the checkpoints of subscriptions
// removed longer ago than the stream's retention (24h), and keeps the others.
func TestRemoveSweepsExpiredCheckpoints(t *testing.T) {
	key, dir := uniqueKey(t), t.TempDir()
	c := newChannel(t, key, dir, kinesis.WithShards(1))
	defer c.Close()
	file := func(sub string) string {
		sum := sha256.Sum256([]byte(sub))
		return filepath.Join(dir, c.Stream(), hex.EncodeToString(sum[:8])+".json")
	}
	if err := os.MkdirAll(filepath.Join(dir, c.Stream()), 0o750); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		sub     string
		removed time.Duration // ago; 0: live
		kept    bool
	}{
		{"expired", 25 * time.Hour, false},
		{"recent", time.Hour, true},
		{"live", 0, true},
	}
	for _, tt := range tests {
		cp := map[string]any{"subscription": tt.sub, "shards": map[string]any{}}
		if tt.removed > 0 {
			cp["removed"] = time.Now().Add(-tt.removed)
		}
		b, _ := json.Marshal(cp)
		if err := os.WriteFile(file(tt.sub), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	channeltest.Consume(t, c, "gone")
	if err := c.Remove(channeltest.Ctx(t, 20*time.Second), "gone"); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct {
		sub     string
		removed time.Duration
		kept    bool
	}{"gone", 0, true})
	for _, tt := range tests {
		if _, err := os.Stat(file(tt.sub)); (err == nil) != tt.kept {
			t.Errorf("checkpoint of %s: stat %v, want kept %v", tt.sub, err, tt.kept)
		}
	}
}

// TestConsumeFromLeased: with a lease table, a subscription started at earliest gets
// the events stored before it that its filter accepts; its catch-up is kept in the table,
// so another replica that opens it (at latest) after the first closed goes on with it;
// removed and re-created, it resumes with what its filter matches stored meanwhile.
func TestConsumeFromLeased(t *testing.T) {
	key, table := uniqueKey(t), leaseTableName()
	c := newLeased(t, key, table, kinesis.WithShards(1))
	match := func(s channel.Stored) bool { return !strings.HasPrefix(s.Event.ID, "x") }
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("o", 4)...)
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("x", 2)...)
	ctx := channeltest.Ctx(t, 60*time.Second)
	k, err := c.ConsumeFrom(ctx, "late", channel.StartFrom{Earliest: true, Match: match})
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"late"}, channeltest.Events("n", 1)...)
	ms := channeltest.ReceiveN(t, k, 5, 30*time.Second)
	channeltest.ExpectNothing(t, k, time.Second)
	channeltest.AckAll(t, ms[:2])
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	c = newLeased(t, key, table, kinesis.WithShards(1))
	defer c.Close()
	k, err = c.ConsumeFrom(ctx, "late", channel.StartFrom{Match: match})
	if err != nil {
		t.Fatal(err)
	}
	got := channeltest.ReceiveN(t, k, 3, 30*time.Second)
	channeltest.ExpectNothing(t, k, time.Second)
	for i, m := range got {
		if want := ms[2+i].Event().ID; m.Event().ID != want {
			t.Fatalf("on the second replica message %d is %s, want %s", i, m.Event().ID, want)
		}
	}
	channeltest.AckAll(t, got)
	if err := c.Remove(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"other"}, channeltest.Events("g", 1)...)
	k, err = c.ConsumeFrom(ctx, "late", channel.StartFrom{Match: match})
	if err != nil {
		t.Fatal(err)
	}
	got = channeltest.ReceiveN(t, k, 1, 30*time.Second)
	channeltest.ExpectNothing(t, k, time.Second)
	if id := got[0].Event().ID; id != "g0" {
		t.Fatalf("re-created after Remove it got %s, want only g0 (stored while it was gone)", id)
	}
}
