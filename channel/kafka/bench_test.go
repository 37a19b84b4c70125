package kafka_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// BenchmarkPublish measures Publish of one 2 KiB event per call from many goroutines,
// each call waiting for acks=all, as concurrent ingress requests do.
func BenchmarkPublish(b *testing.B) {
	c, _ := newChannel(b)
	data := make([]byte, 2048)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	var n atomic.Int64
	// The first Publish creates the topic and waits for its metadata (seconds): do it
	// before the timer, so that small b.N runs measure publishing, not topic creation.
	warm := &event.Event{SpecVersion: "1.0", ID: "warm", Source: "/bench", Type: "io.sluice.bench", Data: data}
	if err := c.Publish(context.Background(), []channel.Envelope{{Event: warm, Subscriptions: []string{"s"}}}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e := &event.Event{SpecVersion: "1.0", ID: strconv.FormatInt(n.Add(1), 10), Source: "/bench",
				Type: "io.sluice.bench", DataContentType: "application/json", Data: data}
			if err := c.Publish(context.Background(), []channel.Envelope{{Event: e, Subscriptions: []string{"s"}}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
