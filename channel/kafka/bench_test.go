package kafka_test

import (
	"context"
	crand "crypto/rand"
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

// BenchmarkConsume measures Receive and Ack of records already in the topic, 2 KiB of
// random (incompressible) data each: the fetch size bounds (option.go) must not limit it.
func BenchmarkConsume(b *testing.B) {
	c, _ := newChannel(b)
	data := make([]byte, 2048)
	if _, err := crand.Read(data); err != nil {
		b.Fatal(err)
	}
	envs := make([]channel.Envelope, b.N)
	for i := range envs {
		envs[i] = channel.Envelope{Event: &event.Event{SpecVersion: "1.0", ID: strconv.Itoa(i), Source: "/bench",
			Type: "io.sluice.bench", Data: data}, Subscriptions: []string{"s"}}
	}
	for i := 0; i < len(envs); i += 1000 {
		if err := c.Publish(context.Background(), envs[i:min(i+1000, len(envs))]); err != nil {
			b.Fatal(err)
		}
	}
	k, err := c.Consume(context.Background(), "s")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		m, err := k.Receive(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
