package jetstream

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// BenchmarkPublish measures storing 2 KiB events (file storage, acknowledged), by Publish
// batch size, number of subscriptions each event is routed to (fan-out writes) and
// whether Publish is called sequentially or from many goroutines (as ingress does).
// Messages are not consumed; the stream is purged between sub-benchmarks.
func BenchmarkPublish(b *testing.B) {
	e := startServer(b, b.TempDir())
	c := newChannel(b, connect(b, e), "bench/default")
	data := make([]byte, 2048)
	subs := []string{"t1", "t2", "t3"}
	for _, bc := range []struct {
		batch, fanout int
		parallel      bool
	}{
		{1, 1, false}, {1, 1, true}, {100, 1, false}, {100, 1, true}, {1, 3, true}, {100, 3, false},
	} {
		name := fmt.Sprintf("batch=%d/fanout=%d/parallel=%v", bc.batch, bc.fanout, bc.parallel)
		b.Run(name, func(b *testing.B) {
			envs := make([]channel.Envelope, bc.batch)
			for i := range envs {
				envs[i] = channel.Envelope{Event: &event.Event{SpecVersion: "1.0", ID: fmt.Sprint(i), Source: "/bench",
					Type: "io.sluice.bench", DataContentType: "application/json", Data: data}, Subscriptions: subs[:bc.fanout]}
			}
			b.SetBytes(int64(bc.batch * len(data)))
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			if bc.parallel {
				b.SetParallelism(16) // 32 goroutines on 2 cores: concurrent ingress requests
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := c.Publish(ctx, envs); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for b.Loop() {
					if err := c.Publish(ctx, envs); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*bc.batch)/b.Elapsed().Seconds(), "events/s")
			s, err := c.js.Stream(ctx, c.Stream())
			if err == nil {
				err = s.Purge(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
