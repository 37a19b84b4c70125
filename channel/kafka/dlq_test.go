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

// TestDLQStoreSharedAndSurvivesRestart: replicas of one broker, and a process started
// again, rebuild the same entries from the topic (dlqtest.Shared); a store of a closed
// channel answers ErrClosed.
func TestDLQStoreSharedAndSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, brokers := newChannel(t)
	dlqtest.Shared(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		r, err := kafka.New(ctx, "ns/broker", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(c.Topic()[:len(c.Topic())-len(".ns.broker")]))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return dlqStore(t, r, lim)
	})
	s := dlqStore(t, c, dlq.DefaultLimits())
	_ = c.Close()
	if _, err := s.List(ctx, "ns/t", 0, 10); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("List on a closed channel: %v; want ErrClosed", err)
	}
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
