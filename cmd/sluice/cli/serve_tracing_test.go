package cli

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestServeTracesDurable runs `sluice serve --channel jetstream --otlp-endpoint` (the
// embedded NATS server) against an OTLP/HTTP receiver decoding the real protobuf. One
// event fails twice toward its subscriber and is dead-lettered; on a durable channel the
// dead letter is stored first and delivered to the sink by the dead-letter queue's own
// dispatcher. Every span is in the client's trace: ingress, the store (durable), the two
// attempts, the dead-letter store, and the delivery to the sink, which is its child.
func TestServeTracesDurable(t *testing.T) {
	keepGC(t)
	var mu sync.Mutex
	var spans []*tracepb.Span
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ex collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &ex) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range ex.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer failing.Close()
	sinkTP := make(chan string, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sinkTP <- r.Header.Get("Traceparent"):
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()

	dir := t.TempDir()
	cfg := fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: shop, namespace: demo}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: orders, namespace: demo}
spec:
  broker: shop
  subscriber: {uri: %q}
  delivery: {retry: 1, backoffDelay: PT0.01S, deadLetterSink: {uri: %q}}
`, failing.URL, sink.URL)
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var log lockedBuffer
	go func() {
		done <- Execute(ctx, []string{"serve", "--config", p, "--addr", addr, "--channel", "jetstream",
			"--data-dir", filepath.Join(dir, "js"), "--otlp-endpoint", recv.URL, "--trace-sample-ratio", "1"}, io.Discard, &log)
	}()
	stopped := false
	stopServe := func() {
		if !stopped {
			stopped = true
			stop()
			<-done // serve exports the spans left before it returns
		}
	}
	defer stopServe()
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never became ready:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	const trace, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, _ := http.NewRequest(http.MethodPost, base+"/demo/shop", strings.NewReader("{}"))
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", "durable-1")
	req.Header.Set("Ce-Source", "/test")
	req.Header.Set("Ce-Type", "order.created")
	req.Header.Set("Traceparent", "00-"+trace+"-"+parent+"-01") // the HTTP header this time
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingress: %s\n%s", resp.Status, log.String())
	}
	var tp string
	select {
	case tp = <-sinkTP:
	case <-time.After(20 * time.Second):
		t.Fatalf("nothing reached the dead-letter sink:\n%s", log.String())
	}
	stopServe()

	mu.Lock()
	defer mu.Unlock()
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		if got := hex.EncodeToString(s.TraceId); got != trace {
			t.Errorf("span %s in trace %s, want %s", s.Name, got, trace)
		}
		byName[s.Name] = append(byName[s.Name], s)
	}
	if len(byName["sluice.ingress"]) != 1 || len(byName["sluice.store"]) != 1 || len(byName["sluice.deliver"]) != 3 || len(byName["sluice.deadletter"]) != 1 {
		t.Fatalf("spans by name: ingress %d, store %d, deliver %d, deadletter %d; want 1, 1, 3 (2 attempts + the sink), 1",
			len(byName["sluice.ingress"]), len(byName["sluice.store"]), len(byName["sluice.deliver"]), len(byName["sluice.deadletter"]))
	}
	in, st, dl := byName["sluice.ingress"][0], byName["sluice.store"][0], byName["sluice.deadletter"][0]
	id := func(s *tracepb.Span) string { return hex.EncodeToString(s.SpanId) }
	pid := func(s *tracepb.Span) string { return hex.EncodeToString(s.ParentSpanId) }
	if pid(in) != parent || pid(st) != id(in) || pid(dl) != id(in) {
		t.Errorf("parents: ingress %s (want %s), store %s and dead-letter %s (want the ingress %s)", pid(in), parent, pid(st), pid(dl), id(in))
	}
	durable := false
	for _, a := range st.Attributes {
		if a.Key == "sluice.durable" {
			durable = a.GetValue().GetBoolValue()
		}
	}
	if !durable {
		t.Errorf("store span on jetstream: sluice.durable not true: %v", st.Attributes)
	}
	var toSink *tracepb.Span
	for _, s := range byName["sluice.deliver"] {
		for _, a := range s.Attributes {
			if a.Key == "sluice.trigger" && a.GetValue().GetStringValue() == "demo/orders/dead-letter" {
				toSink = s
			}
		}
	}
	if toSink == nil || pid(toSink) != id(dl) {
		t.Fatalf("the delivery from the dead-letter queue is not the child of the dead-letter span %s: %v", id(dl), toSink)
	}
	if want := "00-" + trace + "-" + id(toSink) + "-01"; tp != want {
		t.Errorf("the sink got traceparent %q, want %q", tp, want)
	}
}
