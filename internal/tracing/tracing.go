// Package tracing is Sluice's distributed tracing: an OpenTelemetry tracer provider that
// exports spans over OTLP/HTTP, and the W3C trace-context propagation through the
// CloudEvents distributed-tracing extension (traceparent, tracestate) that the broker's
// ingress and the delivery dispatcher use.
//
// Tracing is off unless serve is given --otlp-endpoint: the broker and the dispatcher
// then hold a nil trace.Tracer and check it once per request or attempt, nothing more.
//
// Spans (names and attributes are listed in docs/observability.md):
//
//	sluice.ingress     one per event accepted by a broker's ingress; its parent is the
//	                   event's traceparent extension, else the request's traceparent header
//	  sluice.store     the write of the event into the broker's channel (durable or not)
//	  sluice.deliver   one per attempt toward the subscriber: attempt number, status, the
//	                   backoff before the next attempt
//	    sluice.reply   a reply re-ingested into the broker (or posted to a reply URL)
//	  sluice.deadletter one per attempt toward the dead-letter sink (or the store of the
//	                   dead-letter event on a durable channel)
//
// The stored event's traceparent extension is set to its ingress span, so that every
// delivery attempt, whenever it runs and on whichever replica, joins the trace; each
// attempt sends its own span as the traceparent header and extension to the subscriber,
// as Knative does.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/event"
)

// Extension names of the CloudEvents distributed-tracing extension; they are also the
// W3C trace-context header names.
const (
	ExtTraceParent = "traceparent"
	ExtTraceState  = "tracestate"
)

// Span names.
const (
	SpanIngress    = "sluice.ingress"
	SpanStore      = "sluice.store"
	SpanDeliver    = "sluice.deliver"
	SpanReply      = "sluice.reply"
	SpanDeadLetter = "sluice.deadletter"
)

// Attribute keys beyond OpenTelemetry's semantic conventions.
const (
	AttrBroker    = attribute.Key("sluice.broker")
	AttrTrigger   = attribute.Key("sluice.trigger")
	AttrAttempt   = attribute.Key("sluice.attempt")    // 1 for the first attempt of a phase
	AttrBackoffMS = attribute.Key("sluice.backoff_ms") // wait before the next attempt; absent on the last
	AttrFinal     = attribute.Key("sluice.final")      // no further attempt follows this one
	AttrDurable   = attribute.Key("sluice.durable")    // the channel keeps events across restarts
	AttrStatus    = attribute.Key("http.response.status_code")
	AttrURL       = attribute.Key("url.full")
	AttrEventID   = attribute.Key("cloudevents.event_id")
	AttrEventType = attribute.Key("cloudevents.event_type")
	AttrEventSrc  = attribute.Key("cloudevents.event_source")
)

// Option configures a Provider; see New.
type Option func(*options)

type options struct {
	endpoint string
	ratio    float64
	service  string
	exporter sdktrace.SpanExporter
}

// WithEndpoint sets the OTLP/HTTP collector's base URL, such as http://127.0.0.1:4318;
// spans are POSTed to its /v1/traces path. Required unless WithExporter is given.
func WithEndpoint(u string) Option { return func(o *options) { o.endpoint = u } }

// WithSampleRatio sets the fraction of new traces recorded, from 0 to 1. An event whose
// traceparent says its trace is sampled (or not) is recorded (or not) whatever the ratio,
// so a trace is never cut in the middle. Default 1.
func WithSampleRatio(r float64) Option { return func(o *options) { o.ratio = r } }

// WithServiceName sets the service.name resource attribute. Default "sluice".
func WithServiceName(s string) Option { return func(o *options) { o.service = s } }

// WithExporter exports spans to e instead of OTLP/HTTP (benchmarks). Default: none.
func WithExporter(e sdktrace.SpanExporter) Option { return func(o *options) { o.exporter = e } }

// validate is the one place options are checked; the error names the option.
func (o *options) validate() error {
	switch {
	case o.ratio < 0 || o.ratio > 1 || o.ratio != o.ratio:
		return fmt.Errorf("tracing: WithSampleRatio(%v): want a ratio from 0 to 1", o.ratio)
	case o.service == "":
		return errors.New("tracing: WithServiceName(\"\"): want a name")
	case o.exporter != nil:
		return nil
	case o.endpoint == "":
		return errors.New("tracing: WithEndpoint is required (an OTLP/HTTP collector such as http://127.0.0.1:4318)")
	}
	u, err := url.Parse(o.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("tracing: WithEndpoint(%q): want an http or https URL such as http://127.0.0.1:4318", o.endpoint)
	}
	return nil
}

// Provider records spans and exports them in batches. Create one with New and end it
// with Shutdown, which exports what is left.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New returns a provider exporting to the OTLP/HTTP endpoint (or WithExporter's
// exporter). It returns an error naming an invalid option.
func New(opts ...Option) (*Provider, error) {
	o := options{ratio: 1, service: "sluice"}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	exp := o.exporter
	if exp == nil {
		u, _ := url.Parse(o.endpoint)
		hopts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
		if u.Scheme == "http" {
			hopts = append(hopts, otlptracehttp.WithInsecure())
		}
		path := u.Path
		if path == "" || path == "/" {
			path = "/v1/traces"
		}
		hopts = append(hopts, otlptracehttp.WithURLPath(path))
		var err error
		// New does not dial: the context only bounds set-up.
		if exp, err = otlptracehttp.New(context.Background(), hopts...); err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", o.endpoint, err)
		}
	}
	res := resource.NewSchemaless(attribute.String("service.name", o.service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.ratio))),
	)
	return &Provider{tp: tp}, nil
}

// Tracer returns the tracer Sluice's components record with.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer("github.com/sluice-broker/sluice") }

// ForceFlush exports every span ended so far.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.tp.ForceFlush(ctx) }

// Shutdown exports the spans left and stops the provider.
func (p *Provider) Shutdown(ctx context.Context) error { return p.tp.Shutdown(ctx) }

var propagator = propagation.TraceContext{}

// eventCarrier reads and writes the distributed-tracing extension of an event.
type eventCarrier struct{ e *event.Event }

func (c eventCarrier) Get(key string) string { v, _ := c.e.Get(key); return v }
func (c eventCarrier) Set(key, value string) { c.e.Set(key, value) }
func (c eventCarrier) Keys() []string        { return []string{ExtTraceParent, ExtTraceState} }

// FromEvent returns ctx carrying the remote span context of e's traceparent extension,
// or ctx itself when e has none (or an invalid one).
func FromEvent(ctx context.Context, e *event.Event) context.Context {
	if _, ok := e.Get(ExtTraceParent); !ok {
		return ctx
	}
	return propagator.Extract(ctx, eventCarrier{e})
}

// FromHeader returns ctx carrying the remote span context of h's traceparent header, or
// ctx itself when there is none.
func FromHeader(ctx context.Context, h http.Header) context.Context {
	if h.Get(ExtTraceParent) == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// ToEvent sets e's traceparent (and tracestate, when there is one) to the span of ctx.
// A tracestate e carried that ctx does not is removed.
func ToEvent(ctx context.Context, e *event.Event) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	e.Delete(ExtTraceState)
	propagator.Inject(ctx, eventCarrier{e})
}

// Headers is the trace context of one outgoing request, written over the event's own
// traceparent and tracestate.
type Headers struct {
	TraceParent string
	TraceState  string
}

// HeadersOf returns the trace context of ctx's span, or nil when it has none.
func HeadersOf(ctx context.Context) *Headers {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	var m propagation.MapCarrier = make(map[string]string, 2)
	propagator.Inject(ctx, m)
	return &Headers{TraceParent: m[ExtTraceParent], TraceState: m[ExtTraceState]}
}

// Each calls fn with each header that carries t: Traceparent and its ce- twin, and
// Tracestate and its twin when t has a tracestate.
func (t *Headers) Each(fn func(name, value string)) {
	fn("Traceparent", t.TraceParent)
	fn(hdrCeTraceParent, t.TraceParent)
	if t.TraceState != "" {
		fn("Tracestate", t.TraceState)
		fn(hdrCeTraceState, t.TraceState)
	}
}

// Replaces reports whether an event's own header k gives way to a request's trace
// context (Headers): the ce- twins of traceparent and tracestate, which a request that
// carries a trace context sends as its own (Each; tracestate not at all when it has none).
func Replaces(k string) bool { return k == hdrCeTraceParent || k == hdrCeTraceState }

// The canonical header names of the ce- twins of the trace context.
const (
	hdrCeTraceParent = "Ce-Traceparent"
	hdrCeTraceState  = "Ce-Tracestate"
)

// EventAttributes are the CloudEvents attributes a span records about e.
func EventAttributes(e *event.Event) []attribute.KeyValue {
	return []attribute.KeyValue{AttrEventID.String(e.ID), AttrEventType.String(e.Type), AttrEventSrc.String(e.Source)}
}
