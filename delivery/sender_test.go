package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/tracing"
)

// TestAttemptHeaders sends attempts through both of send's ways of writing headers:
// Sluice's transport, which writes them straight into the request's bytes, and net/http's,
// which gets them on the request's header map. A subscriber must see the same headers
// from both, and the ones the table lists.
func TestAttemptHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ev := func(ext ...event.Extension) *event.Event {
		return &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", DataContentType: "text/plain",
			Extensions: ext, Data: []byte("body")}
	}
	base := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}, "Content-Type": {"text/plain"}}
	with := func(kv ...string) http.Header {
		h := base.Clone()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "-" {
				delete(h, kv[i])
				continue
			}
			h[kv[i]] = []string{kv[i+1]}
		}
		return h
	}
	for _, tt := range []struct {
		name         string
		e            *event.Event
		enc          event.HeaderEncoding
		toSubscriber bool
		structured   bool
		th           *tracing.Headers
		authz        string
		want         http.Header
		wantBody     string // "": the event's data
	}{
		{name: "to a subscriber: ttl stripped, Prefer sent",
			e: ev(event.Extension{Name: "knativebrokerttl", Value: "255"}, event.Extension{Name: "region", Value: "eu"}), toSubscriber: true,
			want: with("Ce-Region", "eu", "Prefer", "reply")},
		{name: "a reply posted on: ttl kept, no Prefer",
			e:    ev(event.Extension{Name: "knativebrokerttl", Value: "255"}),
			want: with("Ce-Knativebrokerttl", "255")},
		{name: "the attempt's trace context replaces the event's",
			e:    ev(event.Extension{Name: "traceparent", Value: "00-old"}, event.Extension{Name: "tracestate", Value: "old=1"}),
			th:   &tracing.Headers{TraceParent: tp, TraceState: "k=v"},
			want: with("Traceparent", tp, "Ce-Traceparent", tp, "Tracestate", "k=v", "Ce-Tracestate", "k=v")},
		{name: "a trace context without tracestate drops the event's",
			e:    ev(event.Extension{Name: "tracestate", Value: "old=1"}),
			th:   &tracing.Headers{TraceParent: tp},
			want: with("Traceparent", tp, "Ce-Traceparent", tp)},
		{name: "no trace context: the event's own are sent",
			e:    ev(event.Extension{Name: "traceparent", Value: "00-old"}),
			want: with("Ce-Traceparent", "00-old")},
		{name: "authorization", e: ev(), authz: "Bearer abc",
			want: with("Authorization", "Bearer abc")},
		{name: "an empty extension value is still sent",
			e:    ev(event.Extension{Name: "empty", Value: ""}),
			want: with("Ce-Empty", "")},
		{name: "minimal encoding", e: ev(event.Extension{Name: "note", Value: " a\x01\"é%41"}),
			want: with("Ce-Note", "%20a%01\"é%2541")},
		{name: "percent encoding", e: ev(event.Extension{Name: "note", Value: "a b\"é"}), enc: event.HeaderPercent,
			want: with("Ce-Note", "a%20b%22%C3%A9")},
		{name: "structured to a subscriber: the event as JSON, ttl stripped, Prefer sent",
			e: ev(event.Extension{Name: "knativebrokerttl", Value: "255"}, event.Extension{Name: "region", Value: "eu"}), toSubscriber: true, structured: true,
			want:     http.Header{"Content-Type": {event.MediaTypeStructured}, "Prefer": {"reply"}},
			wantBody: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","region":"eu","data_base64":"Ym9keQ=="}`},
		{name: "structured reply posted on: ttl kept",
			e: ev(event.Extension{Name: "knativebrokerttl", Value: "255"}), structured: true,
			want:     http.Header{"Content-Type": {event.MediaTypeStructured}},
			wantBody: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","knativebrokerttl":"255","data_base64":"Ym9keQ=="}`},
		{name: "structured with a trace context and authorization: the attempt's trace context in the JSON",
			e: ev(event.Extension{Name: "traceparent", Value: "00-old"}, event.Extension{Name: "tracestate", Value: "old=1"}), structured: true,
			th: &tracing.Headers{TraceParent: tp}, authz: "Bearer abc",
			want:     http.Header{"Content-Type": {event.MediaTypeStructured}, "Traceparent": {tp}, "Authorization": {"Bearer abc"}},
			wantBody: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","traceparent":"` + tp + `","data_base64":"Ym9keQ=="}`},
		{name: "structured JSON data stays JSON", structured: true,
			e:        &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", DataContentType: "application/json", Data: []byte(`{"a":1}`)},
			want:     http.Header{"Content-Type": {event.MediaTypeStructured}},
			wantBody: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/json","data":{"a":1}}`},
		{name: "no datacontenttype, no Content-Type", e: func() *event.Event { e := ev(); e.DataContentType = ""; return e }(),
			want: with("Content-Type", "-")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []http.Header
			var bodies []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				h := r.Header.Clone()
				for _, k := range []string{"User-Agent", "Accept-Encoding", "Content-Length"} {
					delete(h, k) // the transport's own
				}
				mu.Lock()
				got = append(got, h)
				bodies = append(bodies, string(b))
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
			}))
			defer srv.Close()
			u, _ := url.Parse(srv.URL + "/")
			direct := NewClient()
			if _, ok := direct.Transport.(untilRoundTripper); !ok {
				t.Fatalf("NewClient's transport %T takes no header apart from the request (RoundTripUntil)", direct.Transport)
			}
			viaMap := &http.Client{Transport: &http.Transport{}}
			for _, c := range []*http.Client{direct, viaMap} {
				if o := send(context.Background(), c, u, tt.e, 5*time.Second, tt.toSubscriber, 0, tt.enc, tt.structured, tt.th, tt.authz); o.status != http.StatusAccepted {
					t.Fatalf("status %d, err %v", o.status, o.err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 2 {
				t.Fatalf("%d requests, want 2", len(got))
			}
			for i, way := range []string{"written directly", "through a header map"} {
				if !reflect.DeepEqual(got[i], tt.want) {
					t.Errorf("%s: headers\n%v\nwant\n%v", way, got[i], tt.want)
				}
				want := tt.wantBody
				if want == "" {
					want = string(tt.e.Data)
				}
				if bodies[i] != want {
					t.Errorf("%s: body\n%s\nwant\n%s", way, bodies[i], want)
				}
			}
		})
	}
}

// TestBodyNotReusedWhileHTTP2SendsIt: net/http's HTTP/2 transport may still read a
// request's body in another goroutine after the response came and was closed (a
// subscriber answers before it has read the body). send must not hand that body's
// reader to the next attempt meanwhile: under the race detector, reuse shows as a data
// race between the stream's writer and the next attempt's Reset. Every attempt must
// still be answered.
func TestBodyNotReusedWhileHTTP2SendsIt(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusAccepted) // before the body is read
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 256<<10) // more than a stream's first window: the writer waits for the server
	for i := range 40 {
		e := &event.Event{SpecVersion: "1.0", ID: "e", Source: "/s", Type: "t", Data: data}
		if o := send(context.Background(), c, u, e, 10*time.Second, false, 0, event.HeaderMinimal, false, nil, ""); o.status != http.StatusAccepted {
			t.Fatalf("attempt %d: status %d, err %v", i, o.status, o.err)
		}
	}
}
