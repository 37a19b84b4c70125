package broker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-broker/sluice/internal/tracing"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes the protobuf requests the
// exporter POSTs to /v1/traces, as a collector does, and keeps their spans.
type otlpReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	requests int
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ex collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &ex); err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.requests++
		for _, rs := range ex.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.services = append(r.services, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) snapshot() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// attr returns a span attribute as text ("" if absent).
func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

func intAttr(s *tracepb.Span, key string) (int64, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.GetValue().GetIntValue(), true
		}
	}
	return 0, false
}

func boolAttr(s *tracepb.Span, key string) bool {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.GetValue().GetBoolValue()
		}
	}
	return false
}

// TestTracingSpanTree sends one event with a traceparent through a broker whose trigger's
// subscriber answers 503 twice, then 200 with a reply; the reply matches a second
// trigger whose subscriber answers 400, so the reply is dead-lettered. A real OTLP/HTTP
// receiver decodes the exported spans; the test checks the whole tree: one trace, the
// client's span at its root, ingress and store, three attempts with their status,
// attempt number and backoff, the reply's re-ingestion, its failed attempt and the
// dead-letter attempt, and the traceparent each receiver saw.
func TestTracingSpanTree(t *testing.T) {
	recv := newOTLPReceiver(t)
	prov, err := tracing.New(tracing.WithEndpoint(recv.srv.URL), tracing.WithServiceName("sluice-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Shutdown(context.Background())

	var calls atomic.Int32
	var subTP [3]string // traceparent header of each attempt to the subscriber
	var subCeTP [3]string
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n <= 3 {
			subTP[n-1], subCeTP[n-1] = r.Header.Get("Traceparent"), r.Header.Get("Ce-Traceparent")
		}
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		h := w.Header()
		h.Set("Ce-Specversion", "1.0")
		h.Set("Ce-Id", "reply-1")
		h.Set("Ce-Source", "/sub")
		h.Set("Ce-Type", "reply.t")
		w.WriteHeader(http.StatusOK)
	}))
	defer sub.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such thing", http.StatusBadRequest)
	}))
	defer bad.Close()
	dlsGot := make(chan http.Header, 1)
	dls := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case dlsGot <- r.Header.Clone():
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer dls.Close()

	s := newTestServer(t, nil, WithTracer(prov.Tracer()))
	cfg := plainBroker() +
		"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: a, namespace: ns}\n" +
		"spec: {broker: b, filter: {attributes: {type: t}}, subscriber: {uri: \"" + sub.URL + "\"},\n" +
		"  delivery: {retry: 3, backoffPolicy: linear, backoffDelay: PT0.02S}}\n" +
		"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: r, namespace: ns}\n" +
		"spec: {broker: b, filter: {attributes: {type: reply.t}}, subscriber: {uri: \"" + bad.URL + "\"},\n" +
		"  delivery: {retry: 1, backoffDelay: PT0.01S, deadLetterSink: {uri: \"" + dls.URL + "\"}}}\n"
	if err := s.Apply(context.Background(), loadConfig(t, cfg)); err != nil {
		t.Fatal(err)
	}
	ing := httptest.NewServer(s.Handler())
	defer ing.Close()

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, ing.URL+"/ns/b", strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", "ev-1")
	req.Header.Set("Ce-Source", "/test")
	req.Header.Set("Ce-Type", "t")
	req.Header.Set("Ce-Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingress: %s", resp.Status)
	}
	var dlsHeader http.Header
	select {
	case dlsHeader = <-dlsGot:
	case <-time.After(10 * time.Second):
		t.Fatal("the reply never reached the dead-letter sink")
	}

	// 1 ingress + 1 store + 3 attempts + 1 reply + 1 attempt of the reply (400 is not
	// retried) + 1 dead-letter.
	const want = 8
	deadline := time.Now().Add(10 * time.Second)
	var spans []*tracepb.Span
	for {
		if err := prov.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans = recv.snapshot()
		if len(spans) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(spans) != want {
		for _, sp := range spans {
			t.Logf("span %s %x parent %x %v", sp.Name, sp.SpanId, sp.ParentSpanId, sp.Attributes)
		}
		t.Fatalf("got %d spans, want %d", len(spans), want)
	}
	if recv.services[0] != "sluice-test" {
		t.Errorf("service.name = %q", recv.services[0])
	}

	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		if got := hex.EncodeToString(sp.TraceId); got != clientTrace {
			t.Errorf("span %s in trace %s, want the client's %s", sp.Name, got, clientTrace)
		}
		byID[hex.EncodeToString(sp.SpanId)] = sp
	}
	parentOf := func(sp *tracepb.Span) string { return hex.EncodeToString(sp.ParentSpanId) }
	find := func(name, trigger string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, sp := range spans {
			if sp.Name == name && (trigger == "" || attr(sp, string(tracing.AttrTrigger)) == trigger) {
				out = append(out, sp)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].StartTimeUnixNano < out[j].StartTimeUnixNano })
		return out
	}
	one := func(name, trigger string) *tracepb.Span {
		ss := find(name, trigger)
		if len(ss) != 1 {
			t.Fatalf("%d %s spans of %q, want 1", len(ss), name, trigger)
		}
		return ss[0]
	}

	ingress := one(tracing.SpanIngress, "")
	if parentOf(ingress) != clientSpan {
		t.Errorf("ingress parent %s, want the client's span %s", parentOf(ingress), clientSpan)
	}
	if ingress.Kind != tracepb.Span_SPAN_KIND_SERVER || attr(ingress, "sluice.broker") != "ns/b" ||
		attr(ingress, "cloudevents.event_id") != "ev-1" {
		t.Errorf("ingress span: kind %v attributes %v", ingress.Kind, ingress.Attributes)
	}
	if st, _ := intAttr(ingress, "http.response.status_code"); st != 202 {
		t.Errorf("ingress status attribute %d, want 202", st)
	}
	store := one(tracing.SpanStore, "")
	if parentOf(store) != hex.EncodeToString(ingress.SpanId) || boolAttr(store, "sluice.durable") {
		t.Errorf("store span: parent %s (ingress %x), durable %v", parentOf(store), ingress.SpanId, boolAttr(store, "sluice.durable"))
	}

	attempts := find(tracing.SpanDeliver, "ns/a")
	if len(attempts) != 3 {
		t.Fatalf("%d attempts to the subscriber traced, want 3", len(attempts))
	}
	for i, a := range attempts {
		if parentOf(a) != hex.EncodeToString(ingress.SpanId) {
			t.Errorf("attempt %d: parent %s, want the ingress span", i+1, parentOf(a))
		}
		if n, _ := intAttr(a, "sluice.attempt"); n != int64(i+1) {
			t.Errorf("attempt %d: sluice.attempt = %d", i+1, n)
		}
		wantStatus, wantErr := int64(503), true
		if i == 2 {
			wantStatus, wantErr = 200, false
		}
		if st, _ := intAttr(a, "http.response.status_code"); st != wantStatus {
			t.Errorf("attempt %d: status %d, want %d", i+1, st, wantStatus)
		}
		if isErr := a.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR; isErr != wantErr {
			t.Errorf("attempt %d: span status %v", i+1, a.GetStatus())
		}
		b, hasBackoff := intAttr(a, "sluice.backoff_ms")
		switch {
		case i < 2 && (!hasBackoff || b < 10*int64(i+1)*8/10 || b > 20*int64(i+1)*12/10+1):
			t.Errorf("attempt %d: backoff %d ms (present %v), want ~%d ms (linear 20 ms ±20%%)", i+1, b, hasBackoff, 20*(i+1))
		case i == 2 && (hasBackoff || !boolAttr(a, "sluice.final")):
			t.Errorf("last attempt: backoff %v, final %v; want no backoff and final", hasBackoff, boolAttr(a, "sluice.final"))
		}
		// The subscriber saw this attempt as its parent, in the header and the extension.
		wantTP := "00-" + clientTrace + "-" + hex.EncodeToString(a.SpanId) + "-01"
		if subTP[i] != wantTP || subCeTP[i] != wantTP {
			t.Errorf("attempt %d: subscriber got traceparent %q, ce-traceparent %q; want %q", i+1, subTP[i], subCeTP[i], wantTP)
		}
	}

	reply := one(tracing.SpanReply, "ns/a")
	if parentOf(reply) != hex.EncodeToString(attempts[2].SpanId) || attr(reply, "cloudevents.event_id") != "reply-1" {
		t.Errorf("reply span: parent %s, want the last attempt %x; attributes %v", parentOf(reply), attempts[2].SpanId, reply.Attributes)
	}
	rAttempts := find(tracing.SpanDeliver, "ns/r")
	if len(rAttempts) != 1 {
		t.Fatalf("%d attempts of the reply traced, want 1 (a 400 is not retried)", len(rAttempts))
	}
	for i, a := range rAttempts {
		if parentOf(a) != hex.EncodeToString(reply.SpanId) {
			t.Errorf("reply attempt %d: parent %s, want the reply span", i+1, parentOf(a))
		}
		if st, _ := intAttr(a, "http.response.status_code"); st != 400 {
			t.Errorf("reply attempt %d: status %d, want 400", i+1, st)
		}
	}
	dl := one(tracing.SpanDeadLetter, "ns/r")
	if parentOf(dl) != hex.EncodeToString(reply.SpanId) || attr(dl, "url.full") != dls.URL {
		t.Errorf("dead-letter span: parent %s, url %q", parentOf(dl), attr(dl, "url.full"))
	}
	if st, _ := intAttr(dl, "http.response.status_code"); st != 202 {
		t.Errorf("dead-letter status %d, want 202", st)
	}
	if got, want := dlsHeader.Get("Traceparent"), "00-"+clientTrace+"-"+hex.EncodeToString(dl.SpanId)+"-01"; got != want {
		t.Errorf("dead-letter sink got traceparent %q, want %q", got, want)
	}
	if !bytes.Equal(ingress.TraceId, dl.TraceId) {
		t.Error("the dead letter left the trace")
	}
}
