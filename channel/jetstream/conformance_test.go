package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
)

// TestConformance runs the channel contract suite against one embedded server; every
// subtest gets a broker (a stream) of its own. Messages are redelivered one second after
// a "crash", so the restart test is quick.
func TestConformance(t *testing.T) {
	nc := connect(t, startServer(t, t.TempDir()))
	var n atomic.Int64
	keys := map[channel.Channel]string{}
	open := func(t *testing.T, key string, opts ...Option) channel.Channel {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := New(ctx, nc, key, append([]Option{WithLogger(testLogger(t)), WithAckWait(time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		keys[c] = key
		return c
	}
	channeltest.Run(t, channeltest.Harness{
		Open: func(t *testing.T) channel.Channel {
			return open(t, fmt.Sprintf("conformance/b%d", n.Add(1)))
		},
		Durable: true,
		Reopen: func(t *testing.T, old channel.Channel) channel.Channel {
			_ = old.Close()
			return open(t, keys[old])
		},
		Limited: func(t *testing.T, limit int64) channel.Channel {
			return open(t, fmt.Sprintf("conformance/b%d", n.Add(1)), WithMaxBytes(limit))
		},
		MaxUnsettled: maxAckPending,
		TooLarge:     DefaultMaxPayload + 1, // over the embedded server's largest message
	})
}
