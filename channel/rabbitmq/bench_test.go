package rabbitmq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/rabbitmq"
	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
	"github.com/sluice-broker/sluice/event"
)

// BenchmarkPublish measures Publish of one 2 KiB event per call from many goroutines,
// each call waiting for RabbitMQ's confirm, as concurrent ingress requests do: to one
// subscription, and to three (one message each), on quorum and classic
// queues. Nothing consumes: the queues grow by b.N messages.
func BenchmarkPublish(b *testing.B) {
	for _, qt := range []string{rabbitmq.QueueQuorum, rabbitmq.QueueClassic} {
		for _, subs := range [][]string{{"s"}, {"a", "b", "c"}} {
			b.Run(fmt.Sprintf("%s/subs=%d", qt, len(subs)), func(b *testing.B) {
				c, err := rabbitmq.New(context.Background(), "ns/bench", rabbitmq.WithURL(rabbitmqtest.URL(b)),
					rabbitmq.WithPrefix(fmt.Sprintf("bench-%d", rand.Uint32())), rabbitmq.WithQueueType(qt))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				data := make([]byte, 2048)
				for i := range data {
					data[i] = 'a' + byte(i%26)
				}
				// The first Publish declares the queues: before the timer.
				warm := &event.Event{SpecVersion: "1.0", ID: "warm", Source: "/bench", Type: "io.sluice.bench", Data: data}
				if err := c.Publish(context.Background(), []channel.Envelope{{Event: warm, Subscriptions: subs}}); err != nil {
					b.Fatal(err)
				}
				var n atomic.Int64
				b.SetBytes(int64(len(data)))
				b.SetParallelism(32)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						e := &event.Event{SpecVersion: "1.0", ID: strconv.FormatInt(n.Add(1), 10), Source: "/bench",
							Type: "io.sluice.bench", DataContentType: "application/json", Data: data}
						if err := c.Publish(context.Background(), []channel.Envelope{{Event: e, Subscriptions: subs}}); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}
