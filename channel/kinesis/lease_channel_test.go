package kinesis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/event"
)

// leased returns the options of a replica using the lease table called table: leases of
// one second (renewed every third), no checkpoint directory.
func leased(t *testing.T, table string) []kinesis.Option {
	return []kinesis.Option{kinesis.WithLeaseTable(kinesistest.DynamoDB(t), table), kinesis.WithLeaseDuration(time.Second)}
}

// newLeased opens a replica of broker key with a lease table and no checkpoint directory.
func newLeased(t *testing.T, key, table string, opts ...kinesis.Option) *kinesis.Channel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts = append([]kinesis.Option{kinesis.WithAPI(kinesistest.Client(t)),
		kinesis.WithPollInterval(50 * time.Millisecond), kinesis.WithCheckpointInterval(100 * time.Millisecond)},
		append(leased(t, table), opts...)...)
	c, err := kinesis.New(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func leaseTableName() string { return fmt.Sprintf("sluice-test-%d", rand.Uint32()) }

// TestConformanceLeased runs the channel contract suite with the checkpoints in a lease
// table: Reopen releases the leases and the new channel takes them from their checkpoints.
func TestConformanceLeased(t *testing.T) {
	kinesistest.Endpoint(t)
	kinesistest.DynamoDBEndpoint(t)
	table := leaseTableName()
	keys := map[channel.Channel]string{}
	channeltest.Run(t, channeltest.Harness{
		Open: func(t *testing.T) channel.Channel {
			key := uniqueKey(t)
			c := newLeased(t, key, table)
			keys[c] = key
			return c
		},
		Durable: true,
		Reopen: func(t *testing.T, old channel.Channel) channel.Channel {
			_ = old.Close()
			return newLeased(t, keys[old], table)
		},
		MaxUnsettled: 1024,
		TooLarge:     1 << 20,
	})
}

// receiver counts by id what one replica's consumer receives, acking each.
type receiver struct {
	mu  sync.Mutex
	got map[string]int
}

func (r *receiver) run(ctx context.Context, k channel.Consumer) {
	for {
		m, err := k.Receive(ctx)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.got[m.Event().ID]++
		r.mu.Unlock()
		_ = m.Ack()
	}
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// TestLeasedReplicasShareShards: two replicas of one broker on a 4-shard stream with one
// lease table share the shards (the second steals from the first up to its share): both
// receive events, and every event reaches one of them. The first then closes, releasing
// its leases with their checkpoints: the second takes them over and receives every event
// published after, and what the first acked is not delivered again.
func TestLeasedReplicasShareShards(t *testing.T) {
	kinesistest.DynamoDBEndpoint(t)
	key, table := uniqueKey(t), leaseTableName()
	a := newLeased(t, key, table, kinesis.WithShards(4))
	defer a.Close()
	b := newLeased(t, key, table)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ra, rb := &receiver{got: map[string]int{}}, &receiver{got: map[string]int{}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ka, kb := channeltest.Consume(t, a, "sub"), channeltest.Consume(t, b, "sub")
	wg.Go(func() { ra.run(ctx, ka) })
	wg.Go(func() { rb.run(ctx, kb) })

	sent := 0
	publish := func(prefix string, n int) {
		evs := make([]*event.Event, n)
		for i := range evs {
			evs[i] = &event.Event{SpecVersion: "1.0", ID: prefix + strconv.Itoa(sent+i), Source: "/lease", Type: "t",
				Extensions: []event.Extension{{Name: "partitionkey", Value: "k" + strconv.Itoa(sent+i)}}}
		}
		sent += n
		channeltest.Publish(t, a, []string{"sub"}, evs...)
	}
	// Batches of 40 over all keys until both replicas have received some: b holds its
	// share after a few lease rounds.
	waitFor(t, 60*time.Second, func() bool {
		publish("first-", 40)
		time.Sleep(200 * time.Millisecond)
		return ra.count() > 0 && rb.count() > 0
	}, func() string {
		return fmt.Sprintf("a received %d, b %d: the shards are not shared", ra.count(), rb.count())
	})
	first := sent
	waitFor(t, 30*time.Second, func() bool { return distinct(ra, rb, "first-", first) == first }, func() string {
		return fmt.Sprintf("%d of %d received", distinct(ra, rb, "first-", first), first)
	})
	t.Logf("shared: a received %d, b %d", ra.count(), rb.count())
	time.Sleep(500 * time.Millisecond) // the last acks reach the checkpoints
	if err := ka.Close(); err != nil {
		t.Fatal(err)
	}
	fromA := ra.count()
	deliveries := total(ra, rb)
	sent = 0
	const n = 400
	publish("second-", n)
	waitFor(t, 30*time.Second, func() bool { return distinct(rb, rb, "second-", n) == n }, func() string {
		return fmt.Sprintf("b received %d of the %d published after a closed", distinct(rb, rb, "second-", n), n)
	})
	time.Sleep(time.Second) // what the handover would deliver again comes by now
	again := total(ra, rb) - deliveries - n
	t.Logf("after the handover: %d delivered again of the %d a had received", again, fromA)
	if again >= fromA/2 {
		t.Errorf("%d of a's %d events delivered again after a released its leases: the checkpoints were not handed over", again, fromA)
	}
}

// distinct counts the ids prefix0..prefix(n-1) that r1 or r2 received.
func distinct(r1, r2 *receiver, prefix string, n int) int {
	r1.mu.Lock()
	defer r1.mu.Unlock()
	if r2 != r1 {
		r2.mu.Lock()
		defer r2.mu.Unlock()
	}
	c := 0
	for i := range n {
		id := prefix + strconv.Itoa(i)
		if r1.got[id]+r2.got[id] > 0 {
			c++
		}
	}
	return c
}

// total counts every delivery to r1 and r2.
func total(r1, r2 *receiver) int {
	c := 0
	for _, r := range []*receiver{r1, r2} {
		r.mu.Lock()
		for _, v := range r.got {
			c += v
		}
		r.mu.Unlock()
	}
	return c
}

// waitFor polls cond every 50 ms until it holds, failing with what() after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeasesRenewedWhateverTheCheckpointInterval: a replica whose checkpoint interval is
// far longer than its lease still renews every third of the lease, so a second replica
// on the one-shard stream (its share of one lease is none to steal) never finds the lease
// expired: the first receives every event, the second none, for three lease durations.
func TestLeasesRenewedWhateverTheCheckpointInterval(t *testing.T) {
	kinesistest.DynamoDBEndpoint(t)
	key, table := uniqueKey(t), leaseTableName()
	slow := []kinesis.Option{kinesis.WithShards(1), kinesis.WithCheckpointInterval(time.Minute), kinesis.WithLeaseDuration(2 * time.Second)}
	a := newLeased(t, key, table, slow...)
	defer a.Close()
	ka := channeltest.Consume(t, a, "sub")
	ra := &receiver{got: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { ra.run(ctx, ka) })
	channeltest.Publish(t, a, []string{"sub"}, channeltest.Event("before-b"))
	waitFor(t, 30*time.Second, func() bool { return ra.count() == 1 }, func() string { return "a received nothing: it holds no lease" })

	b := newLeased(t, key, table, kinesis.WithLeaseDuration(2*time.Second)) // b checkpoints every 100 ms
	defer b.Close()
	kb := channeltest.Consume(t, b, "sub")
	rb := &receiver{got: map[string]int{}}
	wg.Go(func() { rb.run(ctx, kb) })
	const n = 12
	for i := range n { // one event every 500 ms over 6 s: three lease durations
		channeltest.Publish(t, a, []string{"sub"}, channeltest.Event("e"+strconv.Itoa(i)))
		time.Sleep(500 * time.Millisecond)
	}
	waitFor(t, 30*time.Second, func() bool { return ra.count()+rb.count() >= n+1 }, func() string {
		return fmt.Sprintf("a received %d, b %d of %d", ra.count(), rb.count(), n+1)
	})
	if rb.count() != 0 {
		t.Errorf("b received %d events: it took the lease a was renewing (a received %d)", rb.count(), ra.count())
	}
}
