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

// TestConformance runs the channel contract suite against the real Kafka of
// SLUICE_KAFKA_BROKERS; every subtest gets a topic of its own. One partition keeps the
// restart test's redelivery to the partition it wrote.
func TestConformance(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	prefixes := map[channel.Channel]string{}
	open := func(t *testing.T, prefix string) channel.Channel {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := kafka.New(ctx, "ns/conformance", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(prefix),
			kafka.WithPartitions(1), kafka.WithCommitInterval(100*time.Millisecond), kafka.WithLagInterval(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		prefixes[c] = prefix
		return c
	}
	channeltest.Run(t, channeltest.Harness{
		Open: func(t *testing.T) channel.Channel {
			return open(t, fmt.Sprintf("conformance-%d", rand.Uint32()))
		},
		Durable: true,
		Reopen: func(t *testing.T, old channel.Channel) channel.Channel {
			_ = old.Close()
			return open(t, prefixes[old])
		},
		MaxUnsettled: 1024,
		TooLarge:     1 << 20, // over franz-go's batch limit (about 1 MB)
	})
}
