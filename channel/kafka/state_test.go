package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
)

// TestStateStoreShared: two channels of one broker share its trigger flags on the
// compacted state topic: a Watch begins with the stored flags and an empty-trigger
// marker, then sees what the other channel sets; Get reads the latest.
func TestStateStoreShared(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefix := fmt.Sprintf("test-state-%d", rand.Uint32())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func() channel.StateStore {
		t.Helper()
		c, err := kafka.New(ctx, "ns/broker", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(prefix), kafka.WithPartitions(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		st, err := c.StateStore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := open(), open()
	if f, err := a.Get(ctx, "ns/t1"); err != nil || f.Paused {
		t.Fatalf("Get on an empty topic: %+v, %v", f, err)
	}
	channeltest.StateStoreShared(t, ctx, a, b)
}
