package broker

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// BenchmarkIngressBinary measures the broker ingress for one 1 KiB binary-mode event:
// parsing, the loop guard and arrival-time stamps, routing (no trigger matches, so the
// channel stores nothing and the number is the ingress path alone).
func BenchmarkIngressBinary(b *testing.B) { benchIngress(b) }

// BenchmarkIngressDedup is BenchmarkIngressBinary with the broker's dedup window off and
// on (sluice.dev/dedup-window: 1h): on, every event has a new id, so each is looked up,
// remembered, and past the default bound forgets the oldest.
func BenchmarkIngressDedup(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchIngressWith(b, plainBroker()) })
	b.Run("on", func(b *testing.B) {
		benchIngressWith(b, fmt.Sprintf(brokerDoc, `, annotations: {sluice.dev/dedup-window: "1h"}`))
	})
}

// benchIngress posts one 1 KiB binary-mode event b.N times to a server built with opts
// whose one trigger matches nothing.
func benchIngress(b *testing.B, opts ...Option) { benchIngressWith(b, plainBroker(), opts...) }

// benchIngressWith is benchIngress with broker ns/b as brokerYAML says; with a dedup
// window each event has a new id.
func benchIngressWith(b *testing.B, brokerYAML string, opts ...Option) {
	s := newTestServer(b, nil, opts...)
	if err := s.Apply(context.Background(), loadConfig(b, brokerYAML+triggerDoc("t", "never.matches", "http://127.0.0.1:9/"))); err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	body := bytes.Repeat([]byte("x"), 1024)
	req := httptest.NewRequest(http.MethodPost, "/ns/b", nil)
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", "1")
	req.Header.Set("Ce-Source", "/bench")
	req.Header.Set("Ce-Type", "io.sluice.bench")
	req.Header.Set("Content-Type", "application/octet-stream")
	rd := bytes.NewReader(body)
	w := &discardWriter{h: http.Header{}}
	dedup := s.lookup("ns/b").dedup.Load() != nil
	ids := []string{"1"}
	req.Header["Ce-Id"] = ids
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd.Reset(body)
		r := *req
		r.Body = readCloser{rd}
		r.ContentLength = int64(len(body))
		if dedup {
			ids[0] = strconv.Itoa(i)
		}
		w.code = 0
		h.ServeHTTP(w, &r)
		if w.code != http.StatusAccepted {
			b.Fatalf("status %d", w.code)
		}
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// discardWriter is an http.ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(c int) { w.code = c }

// BenchmarkArrivalStamp measures what knativearrivaltime adds to an ingested event: the
// clock read, the cached format and setting the extension.
func BenchmarkArrivalStamp(b *testing.B) {
	var c arrivalClock
	e := &event.Event{Extensions: make([]event.Extension, 0, 2)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e.Extensions = e.Extensions[:0]
		e.Set(ExtArrivalTime, c.now())
	}
}

func TestArrivalClock(t *testing.T) {
	var c arrivalClock
	before := time.Now().UTC().Truncate(time.Millisecond)
	s := c.now()
	got, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%q is not RFC 3339: %v", s, err)
	}
	if got.Before(before) || got.After(time.Now()) || !strings.HasSuffix(s, "Z") {
		t.Errorf("arrival time %q, want now in UTC (after %s)", s, before)
	}
}
