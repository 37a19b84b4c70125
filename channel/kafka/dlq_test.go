package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
)

func dlqStore(t *testing.T, c *kafka.Channel, lim dlq.Limits) dlq.Store {
	t.Helper()
	s, err := c.DLQStore(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDLQStore(t *testing.T) {
	dlqtest.Run(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		c, _ := newChannel(t)
		return dlqStore(t, c, lim)
	})
}

func TestDLQStoreRefusesBadLimits(t *testing.T) {
	c, _ := newChannel(t)
	if _, err := c.DLQStore(context.Background(), dlq.Limits{MaxEntries: 0, MaxBytes: 1, MaxAge: time.Hour}); err == nil {
		t.Fatal("DLQStore took --dlq-max-entries 0")
	}
}

// TestDLQStoreSharedAndSurvivesRestart stores through one channel, reads, deletes and
// evicts through another of the same broker (a replica), then reopens both: a new
// process rebuilds the same entries from the topic.
func TestDLQStoreSharedAndSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, brokers := newChannel(t)
	open := func() *kafka.Channel {
		r, err := kafka.New(ctx, "ns/broker", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(c.Topic()[:len(c.Topic())-len(".ns.broker")]))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	lim := dlq.Limits{MaxEntries: 4, MaxBytes: 1 << 20, MaxAge: time.Hour}
	s := dlqStore(t, c, lim)
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	replica := open()
	rs := dlqStore(t, replica, lim)
	p, err := rs.List(ctx, "ns/t", 0, 10)
	if err != nil || p.Total != 3 {
		t.Fatalf("a replica lists %d entries (%v); want the 3 stored through the other", p.Total, err)
	}
	if err := rs.Delete(ctx, "ns/t", p.Entries[0].ID); err != nil {
		t.Fatal(err)
	}
	// The replica stores 3 more: with 2 held and a bound of 4, one is evicted.
	evicted := 0
	for i := 3; i < 6; i++ {
		n, err := rs.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 5))
		if err != nil {
			t.Fatal(err)
		}
		evicted += n
	}
	if evicted != 1 {
		t.Fatalf("the replica evicted %d; want 1", evicted)
	}
	want := "2,3,4,5,"
	if got := listIDs(t, s, "ns/t"); got != want {
		t.Fatalf("the first store lists %q after the replica's delete and puts; want %q", got, want)
	}
	if err := s.Delete(ctx, "ns/t", p.Entries[0].ID); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("deleting what the replica deleted: %v; want ErrNotFound", err)
	}
	_ = replica.Close()
	_ = c.Close()
	if _, err := s.List(ctx, "ns/t", 0, 10); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("List on a closed channel: %v; want ErrClosed", err)
	}
	again := dlqStore(t, open(), lim)
	if got := listIDs(t, again, "ns/t"); got != want {
		t.Fatalf("after a restart the store lists %q; want %q", got, want)
	}
	p, _ = again.List(ctx, "ns/t", 0, 10)
	if e := p.Entries[0]; e.Attempts != 3 || e.Code != 503 || e.Reason != "busy" || e.Time.IsZero() {
		t.Fatalf("after a restart entry %+v lost its attempts, code, reason or time", e)
	}
	if n, err := again.Purge(ctx, "ns/t"); err != nil || n != 4 {
		t.Fatalf("purge: %d, %v; want 4", n, err)
	}
	if got := listIDs(t, dlqStore(t, open(), lim), "ns/t"); got != "" {
		t.Fatalf("after a purge a new process lists %q", got)
	}
}

func listIDs(t *testing.T, s dlq.Store, trigger string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := s.List(ctx, trigger, 0, dlq.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	ids := ""
	for _, e := range p.Entries {
		ids += e.Event.ID + ","
	}
	return ids
}

// TestDLQStoreRefusesATopicOfManyPartitions: a dead-letter topic made by hand with more
// than one partition would scatter entries where the store does not read; it refuses it
// with an error naming the topic and the count.
func TestDLQStoreRefusesATopicOfManyPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, brokers := newChannel(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, c.Topic()+".dlq"); err != nil {
		t.Fatal(err)
	}
	s := dlqStore(t, c, dlq.DefaultLimits())
	_, err = s.Put(ctx, "ns/t", dlqtest.Entry("x", 1))
	if err == nil || !strings.Contains(err.Error(), c.Topic()+".dlq has 2 partitions") {
		t.Fatalf("Put on a dead-letter topic of 2 partitions: %v; want an error naming the topic and its partitions", err)
	}
}

// BenchmarkDLQStorePut stores dead letters of 1 KiB one at a time, each waiting for
// the cluster's acks=all and for its record read back.
func BenchmarkDLQStorePut(b *testing.B) {
	c, _ := newChannel(b)
	s, err := c.DLQStore(context.Background(), dlq.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDLQStoreOpen is what a new process pays before its first listing: reading
// 10,000 dead letters of 1 KiB back from the topic.
func BenchmarkDLQStoreOpen(b *testing.B) {
	c, brokers := newChannel(b)
	ctx := context.Background()
	s, err := c.DLQStore(ctx, dlq.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	const n = 10_000
	for i := range n {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
	prefix := c.Topic()[:len(c.Topic())-len(".ns.broker")]
	for b.Loop() {
		r, err := kafka.New(ctx, "ns/broker", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		rs, _ := r.DLQStore(ctx, dlq.DefaultLimits())
		if p, err := rs.List(ctx, "ns/t", 0, 1); err != nil || p.Total != n {
			b.Fatalf("listed %d (%v); want %d", p.Total, err, n)
		}
		_ = r.Close()
	}
}
