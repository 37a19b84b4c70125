package delivery

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// discardExporter drops the spans the batcher hands it.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkDispatchTracing is BenchmarkDispatch with tracing off, and on with 1% and
// 100% of traces sampled (each event arrives with an unsampled or sampled traceparent,
// as the ingress stamps it; spans go in batches to an exporter that drops them).
// docs/observability.md records the numbers.
func BenchmarkDispatchTracing(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"sampled=1%", 0.01}, {"sampled=100%", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.ratio < 0 {
				benchDispatch(b, nil)
				return
			}
			p, err := tracing.New(tracing.WithExporter(discardExporter{}), tracing.WithSampleRatio(bc.ratio))
			if err != nil {
				b.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			// The ingress's span, sampled as the ratio says.
			traceparent := func(i int) []event.Extension {
				flags := "00"
				if float64(i%100) < bc.ratio*100 {
					flags = "01"
				}
				return []event.Extension{{Name: tracing.ExtTraceParent,
					Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags}}
			}
			benchDispatch(b, traceparent, WithTracer(p.Tracer()))
		})
	}
}
