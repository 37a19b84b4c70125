package rabbitmq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/rabbitmq"
	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
)

// TestConformance runs the channel contract suite against the real RabbitMQ of
// SLUICE_RABBITMQ_URL; every subtest gets an exchange and queues of its own (a prefix of
// its own).
func TestConformance(t *testing.T) {
	url := rabbitmqtest.URL(t)
	prefixes := map[channel.Channel]string{}
	open := func(t *testing.T, prefix string, opts ...rabbitmq.Option) channel.Channel {
		c, err := rabbitmq.New(context.Background(), "ns/conformance",
			append([]rabbitmq.Option{rabbitmq.WithURL(url), rabbitmq.WithPrefix(prefix)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		prefixes[c] = prefix
		return c
	}
	newPrefix := func() string { return fmt.Sprintf("conformance-%d", rand.Uint32()) }
	channeltest.Run(t, channeltest.Harness{
		Open:    func(t *testing.T) channel.Channel { return open(t, newPrefix(), rabbitmq.WithMaxMessageBytes(64<<10)) },
		Durable: true,
		Reopen: func(t *testing.T, old channel.Channel) channel.Channel {
			_ = old.Close()
			return open(t, prefixes[old])
		},
		// RabbitMQ's byte limit counts the bodies (event data) of ready messages only:
		// limit bytes of the suite's events hold limit × data/size bytes of bodies, and a
		// prefetch of 1 keeps all but one ready. A quorum queue applies its limit to the
		// publishes after the one that crossed it, so a single burst (the suite's one
		// Publish of 64) goes through whole: a classic queue refuses within the burst.
		Limited: func(t *testing.T, limit int64) channel.Channel {
			e := channeltest.Event("e0")
			return open(t, newPrefix(), rabbitmq.WithPrefetch(1), rabbitmq.WithQueueType(rabbitmq.QueueClassic),
				rabbitmq.WithMaxQueueBytes(limit*int64(len(e.Data))/int64(e.Size())))
		},
		MaxUnsettled: rabbitmq.DefaultPrefetch,
		TooLarge:     64 << 10,
	})
}
