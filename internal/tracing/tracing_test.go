package tracing

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-broker/sluice/event"
)

func TestOptions(t *testing.T) {
	for _, tt := range []struct {
		opts []Option
		want string // "" = valid
	}{
		{[]Option{WithEndpoint("http://127.0.0.1:4318")}, ""},
		{[]Option{WithEndpoint("https://collector.example:4318/custom/path"), WithSampleRatio(0.01)}, ""},
		{nil, "WithEndpoint is required"},
		{[]Option{WithEndpoint("127.0.0.1:4318")}, "want an http or https URL"},
		{[]Option{WithEndpoint("http://127.0.0.1:4318"), WithSampleRatio(1.5)}, "WithSampleRatio(1.5)"},
		{[]Option{WithEndpoint("http://127.0.0.1:4318"), WithSampleRatio(-0.1)}, "WithSampleRatio(-0.1)"},
		{[]Option{WithEndpoint("http://127.0.0.1:4318"), WithServiceName("")}, "WithServiceName"},
	} {
		p, err := New(tt.opts...)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%d options: %v", len(tt.opts), err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%d options: err %v, want one containing %q", len(tt.opts), err, tt.want)
		}
		if p != nil {
			p.Shutdown(context.Background())
		}
	}
}

// TestPropagation reads a traceparent from an event and from headers, writes one back,
// and writes an attempt's headers over the event's own.
func TestPropagation(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t"}
	if ctx := FromEvent(context.Background(), e); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("an event without traceparent gave a span context")
	}
	e.Set(ExtTraceParent, tp)
	e.Set(ExtTraceState, "vendor=1")
	sc := trace.SpanContextFromContext(FromEvent(context.Background(), e))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" ||
		!sc.IsSampled() || !sc.IsRemote() || sc.TraceState().Get("vendor") != "1" {
		t.Errorf("from the event: %+v", sc)
	}
	e.Set(ExtTraceParent, "not a traceparent")
	if sc := trace.SpanContextFromContext(FromEvent(context.Background(), e)); sc.IsValid() {
		t.Errorf("an invalid traceparent gave %+v", sc)
	}
	h := http.Header{}
	h.Set("Traceparent", tp)
	ctx := FromHeader(context.Background(), h)
	if sc := trace.SpanContextFromContext(ctx); sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("from the header: %+v", sc)
	}

	// ToEvent replaces both, dropping a tracestate the context does not have.
	out := &event.Event{Extensions: []event.Extension{{Name: ExtTraceState, Value: "old=1"}}}
	ToEvent(ctx, out)
	if v, _ := out.Get(ExtTraceParent); v != tp {
		t.Errorf("traceparent %q, want %q", v, tp)
	}
	if v, ok := out.Get(ExtTraceState); ok {
		t.Errorf("tracestate %q kept", v)
	}
	ToEvent(context.Background(), out) // no span: unchanged
	if v, _ := out.Get(ExtTraceParent); v != tp {
		t.Errorf("traceparent changed without a span: %q", v)
	}

	hs := HeadersOf(ctx)
	if hs == nil || hs.TraceParent != tp {
		t.Fatalf("headers %+v", hs)
	}
	// The headers a request carries: the event's twins give way to the context's, and
	// without a tracestate in the context neither tracestate header is sent.
	req := http.Header{}
	own := &event.Event{Extensions: []event.Extension{{Name: ExtTraceParent, Value: "00-x"}, {Name: ExtTraceState, Value: "a=b"}, {Name: "other", Value: "1"}}}
	event.EachHeader(own, event.HeaderMinimal, func(k, v string) {
		if !Replaces(k) {
			req[k] = append(req[k], v)
		}
	})
	hs.Each(func(k, v string) { req[k] = append(req[k], v) })
	want := http.Header{"Traceparent": {tp}, "Ce-Traceparent": {tp}, "Ce-Other": {"1"}}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("request headers %v, want %v", req, want)
	}
	withState := &Headers{TraceParent: tp, TraceState: "k=v"}
	req = http.Header{}
	withState.Each(func(k, v string) { req[k] = append(req[k], v) })
	want = http.Header{"Traceparent": {tp}, "Ce-Traceparent": {tp}, "Tracestate": {"k=v"}, "Ce-Tracestate": {"k=v"}}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("request headers with a tracestate %v, want %v", req, want)
	}
	if HeadersOf(context.Background()) != nil {
		t.Error("headers without a span")
	}
}
