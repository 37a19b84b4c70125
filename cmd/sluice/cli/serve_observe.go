package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/internal/tracing"
	"github.com/sluice-broker/sluice/ui"
)

// observeFlags are serve's observability flags: tracing (--otlp-endpoint,
// --trace-sample-ratio). The dashboard (GET /ui) has none: it is always served.
type observeFlags struct {
	otlpEndpoint string
	sampleRatio  float64
}

func (o *observeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector (such as http://127.0.0.1:4318); tracing is off without it")
	fl.Float64Var(&o.sampleRatio, "trace-sample-ratio", 1, "fraction of new traces recorded (0 to 1); an event whose traceparent is sampled is recorded whatever the ratio")
}

// observers are what serve's observability flags started: the tracer (nil when tracing
// is off) and the dashboard's monitor.
type observers struct {
	tracer trace.Tracer
	ui     *ui.Monitor
	close  func() // exports the spans left; call after the broker server has shut down
}

// start makes the dashboard's monitor of the metrics of reg and of the brokers notReady
// names, and starts tracing when --otlp-endpoint is set.
func (o *observeFlags) start(log *slog.Logger, reg prometheus.Gatherer, notReady func() map[string]string) (*observers, error) {
	mon, err := ui.New(ui.WithGatherer(reg), ui.WithNotReady(notReady))
	if err != nil {
		return nil, err
	}
	obs := &observers{ui: mon, close: func() {}}
	if o.otlpEndpoint == "" {
		return obs, nil
	}
	if o.sampleRatio < 0 || o.sampleRatio > 1 {
		return nil, fmt.Errorf("--trace-sample-ratio %v: want a ratio from 0 to 1", o.sampleRatio)
	}
	p, err := tracing.New(tracing.WithEndpoint(o.otlpEndpoint), tracing.WithSampleRatio(o.sampleRatio))
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	log.Info("tracing on", "otlp_endpoint", o.otlpEndpoint, "sample_ratio", o.sampleRatio)
	obs.tracer = p.Tracer()
	obs.close = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			log.Warn("exporting the last spans", "err", err)
		}
	}
	return obs, nil
}

// withUI serves the dashboard (/ui, /ui/snapshot.json) from memory, ahead of next: its
// requests never wait on ingress work.
func (obs *observers) withUI(next http.Handler) http.Handler {
	page := obs.ui.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ui.Handles(r.URL.Path) {
			page.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
