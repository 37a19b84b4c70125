package broker

import (
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// WithTracer records a span per ingested event (and its store into the channel) and
// hands the tracer to every dispatcher, which records each delivery attempt. Default:
// nil, no tracing, which costs ingress one nil check per request.
func WithTracer(t trace.Tracer) Option { return func(o *options) { o.tracer = t } }

// ingressSpans are the spans of one request's events: an ingress span and its store
// child per event.
type ingressSpans struct {
	spans []trace.Span // ingress, store, ingress, store, …; store is nil when not recording
}

// startIngress starts the spans of evs, received by b at start, and sets each event's
// traceparent extension to its ingress span, so that its deliveries join the trace. The
// parent of an event's span is its own traceparent extension, else the request's
// traceparent header. Called only with tracing on.
func (s *Server) startIngress(r *http.Request, b *Broker, evs []*event.Event, start time.Time) *ingressSpans {
	tr := s.opts.tracer
	hctx := tracing.FromHeader(r.Context(), r.Header)
	is := &ingressSpans{spans: make([]trace.Span, 0, 2*len(evs))}
	for _, e := range evs {
		ctx := hctx
		if _, ok := e.Get(tracing.ExtTraceParent); ok {
			ctx = tracing.FromEvent(r.Context(), e)
		}
		ctx, in := tr.Start(ctx, tracing.SpanIngress, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
		tracing.ToEvent(ctx, e)
		var st trace.Span // only under a span that records: an unsampled trace costs little
		if in.IsRecording() {
			in.SetAttributes(append(tracing.EventAttributes(e), tracing.AttrBroker.String(b.key))...)
			_, st = tr.Start(ctx, tracing.SpanStore, trace.WithSpanKind(trace.SpanKindInternal),
				trace.WithAttributes(tracing.AttrBroker.String(b.key), tracing.AttrDurable.Bool(b.durable)))
		}
		is.spans = append(is.spans, in, st)
	}
	return is
}

// end ends the spans with the outcome of the store, err, and the request's status.
func (is *ingressSpans) end(err error, status int) {
	for i := 0; i+1 < len(is.spans); i += 2 {
		in, st := is.spans[i], is.spans[i+1]
		if st == nil { // not recording
			in.End()
			continue
		}
		if err != nil {
			st.SetStatus(codes.Error, err.Error())
			in.SetStatus(codes.Error, err.Error())
		}
		st.End()
		in.SetAttributes(tracing.AttrStatus.Int(status))
		in.End()
	}
}

// storeStatus is the status ingress answers after a store that returned err.
func storeStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusAccepted
	case errors.Is(err, channel.ErrFull):
		return http.StatusTooManyRequests
	case errors.Is(err, channel.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusServiceUnavailable
}

// errShuttingDown is the error of an ingress span refused at shutdown.
var errShuttingDown = errors.New("shutting down")
