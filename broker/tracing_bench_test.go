package broker

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-broker/sluice/internal/tracing"
)

// discardExporter drops the spans the batcher hands it: the benchmarks measure what
// recording costs the ingress, not a collector.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkIngressTracing is BenchmarkIngressBinary with tracing off, and on with 1% and
// 100% of traces sampled (spans exported in batches to an exporter that drops them).
// docs/observability.md records the numbers.
func BenchmarkIngressTracing(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"sampled=1%", 0.01}, {"sampled=100%", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []Option
			if bc.ratio >= 0 {
				p, err := tracing.New(tracing.WithExporter(discardExporter{}), tracing.WithSampleRatio(bc.ratio))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Shutdown(context.Background())
				opts = append(opts, WithTracer(p.Tracer()))
			}
			benchIngress(b, opts...)
		})
	}
}
