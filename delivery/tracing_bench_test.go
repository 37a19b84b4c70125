package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

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
	data, err := os.ReadFile("../testdata/sample-ce-data.json")
	if err != nil {
		b.Fatalf("sample payload: %v", err)
	}
	for _, bc := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"sampled=1%", 0.01}, {"sampled=100%", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusAccepted)
			}))
			defer srv.Close()
			opts := []Option{WithAdaptive(false)}
			if bc.ratio >= 0 {
				p, err := tracing.New(tracing.WithExporter(discardExporter{}), tracing.WithSampleRatio(bc.ratio))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Shutdown(context.Background())
				opts = append(opts, WithTracer(p.Tracer()))
			}
			q, pub := newQueue(b)
			d := NewDispatcher(q, Target{Name: "ns/bench", URL: srv.URL, MaxInFlight: 32}, opts...)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { d.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()

			evs := make([]*event.Event, b.N)
			for i := range evs {
				ext := []event.Extension{{Name: ExtTTL, Value: "255"}}
				if bc.ratio >= 0 { // the ingress's span: sampled as the ratio says
					flags := "00"
					if float64(i%100) < bc.ratio*100 {
						flags = "01"
					}
					ext = append(ext, event.Extension{Name: tracing.ExtTraceParent,
						Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-" + flags})
				}
				evs[i] = &event.Event{SpecVersion: "1.0", ID: "id", Source: "/bench", Type: "io.triggermesh.perf.drill",
					DataContentType: "application/json", Data: data, Extensions: ext}
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for i := 0; i < len(evs); i += 1000 {
				for int64(i)-q.acked.Load() > 20000 {
					time.Sleep(100 * time.Microsecond)
				}
				pub(evs[i:min(i+1000, len(evs))]...)
			}
			for q.acked.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
		})
	}
}
