package delivery

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/redact"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// WithTracer records a span per attempt (to the subscriber, a reply URL or the
// dead-letter sink) and per re-ingested reply, as children of the trace the event's
// traceparent extension names; each attempt sends its span as traceparent to the
// receiver. Default: nil, no tracing, which costs one nil check per attempt.
func WithTracer(t trace.Tracer) Option { return func(d *Dispatcher) { d.tracer = t } }

// spanNames name the attempt span of each phase.
var spanNames = [...]string{phaseDeliver: tracing.SpanDeliver, phaseReply: tracing.SpanDeliver, phaseDeadLetter: tracing.SpanDeadLetter}

// startAttempt starts the span of j's next attempt of sending ev to dest, ending the
// previous attempt's span if one is still open. The span's parent is ev's traceparent.
// It returns the context carrying the span and the trace headers the request must carry.
// Called only with tracing on.
func (d *Dispatcher) startAttempt(ctx context.Context, t *resolved, j *job, ev *event.Event, dest *url.URL) (context.Context, *tracing.Headers) {
	d.endAttempt(j)
	ctx, j.span = d.tracer.Start(tracing.FromEvent(ctx, ev), spanNames[j.phase], trace.WithSpanKind(trace.SpanKindProducer))
	if j.span.IsRecording() { // an unsampled trace costs little
		j.span.SetAttributes(append(tracing.EventAttributes(ev),
			tracing.AttrTrigger.String(t.Name), tracing.AttrURL.String(redact.Of(dest)),
			tracing.AttrAttempt.Int(j.attempt+1))...)
	}
	return ctx, tracing.HeadersOf(ctx)
}

// traceOutcome records an attempt's result on its span, if any.
func traceOutcome(j *job, o *outcome) {
	if j.span == nil {
		return
	}
	if o.status != 0 {
		j.span.SetAttributes(tracing.AttrStatus.Int(o.status))
	}
	switch {
	case o.err != nil:
		j.span.SetStatus(codes.Error, o.err.Error())
	case !o.ok():
		j.span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(o.status))
	}
}

// traceRetry marks the attempt's span with the wait before the next attempt and ends it.
func traceRetry(j *job, wait time.Duration) {
	if j.span == nil {
		return
	}
	j.span.SetAttributes(tracing.AttrBackoffMS.Int64(wait.Milliseconds()))
	j.span.End()
	j.span = nil
}

// endAttempt ends the open attempt span of j, if any: no further attempt of this phase
// follows it.
func (d *Dispatcher) endAttempt(j *job) {
	if j.span == nil {
		return
	}
	j.span.SetAttributes(tracing.AttrFinal.Bool(true))
	j.span.End()
	j.span = nil
}

// traceReply starts the span of a reply's re-ingestion or posting, a child of the reply's
// own traceparent if the subscriber set one, else of the attempt that got it, and sets
// the reply's traceparent to it so its own deliveries join the trace. The caller ends
// the span. Called only with tracing on.
func (d *Dispatcher) traceReply(ctx context.Context, t *resolved, r *event.Event) (context.Context, trace.Span) {
	ctx, sp := d.tracer.Start(tracing.FromEvent(ctx, r), tracing.SpanReply,
		trace.WithAttributes(append(tracing.EventAttributes(r), tracing.AttrTrigger.String(t.Name))...))
	tracing.ToEvent(ctx, r)
	return ctx, sp
}

// endSpan ends sp, recording err.
func endSpan(sp trace.Span, err error) {
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}
