package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// BenchmarkDispatch measures one event through the dispatcher to a local subscriber that
// accepts everything: receive from a memory channel, binary-mode POST of the 2 KiB sample
// payload over a keep-alive connection, ack. allocs/op counts both sides of the HTTP
// exchange (the test server's allocations included).
func BenchmarkDispatch(b *testing.B) { benchDispatch(b, nil) }

// benchDispatch runs b.N events of the 2 KiB sample payload through a dispatcher built
// with opts (the adaptive limit off) to a local subscriber that accepts everything. ext,
// when not nil, gives event i extensions beside its knativebrokerttl.
func benchDispatch(b *testing.B, ext func(i int) []event.Extension, opts ...Option) {
	benchDispatchTo(b, Target{Name: "ns/bench", MaxInFlight: 32}, ext, opts...)
}

// BenchmarkDispatchCaps is BenchmarkDispatch with a trigger's caps off and on: an
// in-flight cap below the server's, and a delivery-rate cap high enough never to make an
// attempt wait, so what it shows is the cost of taking a token.
func BenchmarkDispatchCaps(b *testing.B) {
	for _, bc := range []struct {
		name string
		t    Target
	}{
		{"off", Target{MaxInFlight: 32}},
		{"in-flight=4", Target{MaxInFlight: 4}},
		{"rate=1e6", Target{MaxInFlight: 32, MaxDeliveryRate: 1e6}},
		{"both", Target{MaxInFlight: 4, MaxDeliveryRate: 1e6}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.t.Name = "ns/bench"
			benchDispatchTo(b, bc.t, nil)
		})
	}
}

// benchDispatchTo is benchDispatch to t (its URL set to the local subscriber).
func benchDispatchTo(b *testing.B, t Target, ext func(i int) []event.Extension, opts ...Option) {
	data, err := os.ReadFile("../testdata/sample-ce-data.json")
	if err != nil {
		b.Fatalf("sample payload: %v", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	q, pub := newQueue(b)
	t.URL = srv.URL
	d := NewDispatcher(q, t, append([]Option{WithAdaptive(false)}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	evs := make([]*event.Event, b.N)
	for i := range evs {
		exts := []event.Extension{{Name: ExtTTL, Value: "255"}}
		if ext != nil {
			exts = append(exts, ext(i)...)
		}
		evs[i] = &event.Event{SpecVersion: "1.0", ID: "id", Source: "/bench", Type: "io.triggermesh.perf.drill",
			DataContentType: "application/json", Data: data, Extensions: exts}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < len(evs); i += 1000 {
		// Keep at most ~20,000 events queued, so the channel's budget holds for any b.N.
		for int64(i)-q.acked.Load() > 20000 {
			time.Sleep(100 * time.Microsecond)
		}
		pub(evs[i:min(i+1000, len(evs))]...)
	}
	for q.acked.Load() < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
}

// BenchmarkAttemptRequest builds the header and body bytes of one attempt to a
// subscriber, the sample payload with the load generator's extensions: written directly
// from the event (what Sluice's transport does, given attemptHead.each) against set on
// a header map first and written from it (what it did before, and what other transports
// still get): the reason attemptHead writes itself.
func BenchmarkAttemptRequest(b *testing.B) {
	data, err := os.ReadFile("../testdata/sample-ce-data.json")
	if err != nil {
		b.Fatalf("sample payload: %v", err)
	}
	e := &event.Event{SpecVersion: "1.0", ID: "b2a4c9d1-000001", Source: "/bench", Type: "io.triggermesh.perf.drill",
		DataContentType: "application/json", Data: data, Extensions: []event.Extension{
			{Name: "sluicerun", Value: "67b790464269"}, {Name: "sluiceseq", Value: "123456"}, {Name: "sluicesent", Value: "1764034032123456789"},
			{Name: ExtTTL, Value: "255"}, {Name: "knativearrivaltime", Value: "2026-11-25T01:27:12.123Z"}}}
	u, _ := url.Parse("http://127.0.0.1:9411/")
	for _, way := range []string{"direct", "header-map"} {
		b.Run(way, func(b *testing.B) {
			r := requestPool.Get().(*request)
			r.tmpl.URL, r.tmpl.Host = u, u.Host
			buf := make([]byte, 0, 8<<10)
			b.ReportAllocs()
			for b.Loop() {
				head := attemptHead{e: e, toSubscriber: true}
				r.body.Reset(e.Data)
				r.tmpl.Body, r.tmpl.ContentLength = &r.body, int64(len(e.Data))
				line := func(k, v string) {
					buf = append(append(append(append(buf, k...), ": "...), v...), "\r\n"...)
				}
				buf = buf[:0]
				if way == "direct" {
					head.each(line)
				} else {
					head.writeTo(r.h)
					for k, vs := range r.h {
						for _, v := range vs {
							line(k, v)
						}
					}
					clear(r.h)
				}
				buf = append(buf, e.Data...)
			}
		})
	}
}
