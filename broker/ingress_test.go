package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/httpserver"
)

// recorder is a subscriber that records the ce-id and body of every event it accepts.
type recorder struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]string
}

func newRecorder(t *testing.T) *recorder {
	rc := &recorder{got: map[string]string{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got[r.Header.Get("Ce-Id")] = string(body)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *recorder) ids() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ids := make([]string, 0, len(rc.got))
	for id := range rc.got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// post sends one request to the handler: headers h, body, method.
func post(h http.Handler, method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// binary returns the headers of a binary-mode event of type t.
func binary(id string, extra ...string) map[string]string {
	h := map[string]string{"Ce-Specversion": "1.0", "Ce-Id": id, "Ce-Source": "/test", "Ce-Type": "t",
		"Content-Type": "application/json"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// TestIngressStatus drives the ingress handler through every answer it gives, in
// process: each case's status, Allow or Retry-After header and rejection reason; the
// accepted events reach the subscriber.
func TestIngressStatus(t *testing.T) {
	sub := newRecorder(t)
	s := newTestServer(t, nil, WithMaxEventBytes(256))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub.URL))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	structured := func(id string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/test","type":"t","datacontenttype":"application/json","data":{"n":1}}`
	}
	tests := []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		body   string
		status int
		header string // "Name: value" the answer must carry
		reason string // requests_rejected_total reason counted
	}{
		{"binary", "POST", "/ns/b", binary("bin"), `{"n":1}`, 202, "", ""},
		{"structured", "POST", "/ns/b", map[string]string{"Content-Type": "application/cloudevents+json"}, structured("str"), 202, "", ""},
		{"batch", "POST", "/ns/b", map[string]string{"Content-Type": "application/cloudevents-batch+json"},
			"[" + structured("bat1") + "," + structured("bat2") + "]", 202, "", ""},
		{"trailing slash", "POST", "/ns/b/", binary("slash"), `{}`, 202, "", ""},
		{"missing id", "POST", "/ns/b", binary(""), `{}`, 400, "", "invalid"},
		{"old specversion", "POST", "/ns/b", binary("v03", "Ce-Specversion", "0.3"), `{}`, 400, "", "invalid"},
		{"invalid structured", "POST", "/ns/b", map[string]string{"Content-Type": "application/cloudevents+json"}, `{"id":`, 400, "", "invalid"},
		{"ttl spent", "POST", "/ns/b", binary("loop", "Ce-Knativebrokerttl", "0"), `{}`, 400, "", "ttl"},
		{"unknown broker", "POST", "/nope/nope", binary("x"), `{}`, 404, "", ""},
		{"GET", "GET", "/ns/b", nil, "", 405, "Allow: POST, OPTIONS", "method"},
		{"OPTIONS", "OPTIONS", "/ns/b", nil, "", 200, "Allow: POST, OPTIONS", ""},
		{"too large", "POST", "/ns/b", binary("big"), strings.Repeat("x", 257), 413, "", "too_large"},
		{"xml structured", "POST", "/ns/b", map[string]string{"Content-Type": "application/cloudevents+xml"}, "<e/>", 415, "", "unsupported_media_type"},
		{"healthz", "GET", "/healthz", nil, "", 200, "", ""},
		{"readyz", "GET", "/readyz", nil, "", 200, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before float64
			if tt.reason != "" {
				before = counter(s.metrics.rejected.WithLabelValues("ns/b", tt.reason))
			}
			rec := post(h, tt.method, tt.path, tt.hdr, tt.body)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.header != "" {
				name, value, _ := strings.Cut(tt.header, ": ")
				if got := rec.Header().Get(name); got != value {
					t.Errorf("%s: %q, want %q", name, got, value)
				}
			}
			if tt.reason != "" {
				if d := counter(s.metrics.rejected.WithLabelValues("ns/b", tt.reason)) - before; d != 1 {
					t.Errorf("requests_rejected_total{reason=%q} rose by %v, want 1", tt.reason, d)
				}
			}
		})
	}
	want := []string{"bat1", "bat2", "bin", "slash", "str"}
	deadline := time.Now().Add(5 * time.Second)
	for len(sub.ids()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := sub.ids(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("subscriber got %v, want %v", got, want)
	}
	if body := sub.got["bin"]; body != `{"n":1}` {
		t.Errorf("binary event's body delivered as %q", body)
	}

	// Shutting down: ingress answers 503 with Retry-After, and readyz turns 503.
	s.Shutdown(context.Background())
	if rec := post(h, "POST", "/ns/b", binary("late"), `{}`); rec.Code != 503 || rec.Header().Get("Retry-After") != "5" {
		t.Errorf("after Shutdown: %d Retry-After %q, want 503 and 5", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := post(h, "GET", "/readyz", nil, ""); rec.Code != 503 {
		t.Errorf("readyz after Shutdown: %d, want 503", rec.Code)
	}
}

// TestIngressFullAndUnavailable checks the answers of a full and of a failing channel:
// 429 with Retry-After before the body is read when the request declares its length,
// 429 after it when it does not, and 503 with Retry-After when the channel cannot store.
func TestIngressFullAndUnavailable(t *testing.T) {
	sub, _, release := gatedSubscriber(t) // the filler stays queued until release
	defer release()
	budget := memory.NewBudget(1024)
	var ch channel.Channel
	open := func(_ context.Context, _ config.Broker) (channel.Channel, error) {
		ch = memory.New(memory.WithBudget(budget))
		return ch, nil
	}
	s, err := NewServer(WithChannelOpener(open), WithLogger(discardLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	big := strings.Repeat("x", 500) // with the filler, more than the budget holds
	if rec := post(h, "POST", "/ns/b", binary("filler"), strings.Repeat("x", 200)); rec.Code != 202 {
		t.Fatalf("the filler: %d %s", rec.Code, rec.Body)
	}

	rec := post(h, "POST", "/ns/b", binary("declared"), big)
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" {
		t.Errorf("full, length declared: %d Retry-After %q, want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}

	req := httptest.NewRequest("POST", "/ns/b", io.MultiReader(strings.NewReader(big))) // no length
	for k, v := range binary("chunked") {
		req.Header.Set(k, v)
	}
	req.ContentLength = -1
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	if rr.Code != 429 || rr.Header().Get("Retry-After") == "" {
		t.Errorf("full, length unknown: %d Retry-After %q, want 429 with Retry-After", rr.Code, rr.Header().Get("Retry-After"))
	}
	if n := counter(s.metrics.rejected.WithLabelValues("ns/b", "full")); n != 2 {
		t.Errorf("requests_rejected_total{reason=full} = %v, want 2", n)
	}

	// A body larger than the channel ever holds is 413, not a 429 to retry forever.
	if rec := post(h, "POST", "/ns/b", binary("huge"), strings.Repeat("x", 1100)); rec.Code != 413 || rec.Header().Get("Retry-After") != "" ||
		rec.Body.String() != "body exceeds the size limit: 1100 bytes, more than the channel holds at once (1024 bytes, --memory-limit)\n" {
		t.Errorf("larger than the channel: %d Retry-After %q %q, want 413 naming --memory-limit", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	// So is one of unknown length, found larger once read.
	req = httptest.NewRequest("POST", "/ns/b", io.MultiReader(strings.NewReader(strings.Repeat("x", 1100))))
	for k, v := range binary("huge-chunked") {
		req.Header.Set(k, v)
	}
	req.ContentLength = -1
	rr = httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	if rr.Code != 413 || rr.Header().Get("Retry-After") != "" || !strings.Contains(rr.Body.String(), "--memory-limit") {
		t.Errorf("larger than the channel, length unknown: %d Retry-After %q %q, want 413 naming --memory-limit", rr.Code, rr.Header().Get("Retry-After"), rr.Body)
	}
	release()
	if rec := post(h, "POST", "/ns/b", binary("fits"), `{}`); rec.Code != 202 {
		t.Errorf("an event that fits: %d %s", rec.Code, rec.Body)
	}

	ch.Close() // the backend goes away under the broker
	rec = post(h, "POST", "/ns/b", binary("closed"), `{}`)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "cannot store events") {
		t.Errorf("channel closed: %d Retry-After %q %q, want 503, 1, cannot store events", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}

// failingChannel is a memory channel whose Publish fails with err: a backend that is down
// or full, with the words it would say in that case.
type failingChannel struct {
	channel.Channel
	err error
}

func (f *failingChannel) Publish(context.Context, []channel.Envelope) error { return f.err }

// TestRefusalTellsTheReasonNotTheBackend: a request whose events the channel did not
// store is told the channel's reason (channel.Refuse), or one by the error's kind, never
// the backend's own error (hosts, accounts, topics); the log has the whole error, once
// for the three refusals (ratelog counts the other two into the next line, ten seconds on).
func TestRefusalTellsTheReasonNotTheBackend(t *testing.T) {
	const secret = "dial tcp 10.1.2.3:9092 as arn:aws:iam::123456789012:role/ingest"
	tests := []struct {
		name   string
		err    error
		status int // 429 and 503 with Retry-After, 413 without
		body   string
	}{
		{"unavailable, with a reason", channel.Refuse(channel.ErrUnavailable, "Kafka did not store the events", errors.New(secret)),
			503, "cannot store events: Kafka did not store the events\n"},
		{"full, with a reason", channel.Refuse(channel.ErrFull, "Kinesis is throttling writes", errors.New(secret)),
			429, "channel full: try again after Retry-After: Kinesis is throttling writes\n"},
		{"unavailable, no reason", fmt.Errorf("%w: %s", channel.ErrUnavailable, secret),
			503, "cannot store events: the channel's store is unavailable\n"},
		{"full, no reason", fmt.Errorf("%w: %s", channel.ErrFull, secret),
			429, "channel full: try again after Retry-After: the channel has no room for the events now\n"},
		{"too large", channel.Refuse(channel.ErrTooLarge, "event e is 1048600 bytes encoded, over Kinesis's 1 MiB record limit", errors.New(secret)),
			413, "event too large: event e is 1048600 bytes encoded, over Kinesis's 1 MiB record limit\n"},
		{"neither", errors.New(secret),
			503, "cannot store events: the channel could not store the events\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs lockedBuffer
			open := func(context.Context, config.Broker) (channel.Channel, error) {
				return &failingChannel{Channel: memory.New(), err: tt.err}, nil
			}
			s, err := NewServer(WithChannelOpener(open), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), withRejectHold(0))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", "http://127.0.0.1:1/"))); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				rec := post(s.Handler(), "POST", "/ns/b", binary(fmt.Sprint("e", i)), `{}`)
				if retry := rec.Header().Get("Retry-After") != ""; rec.Code != tt.status || retry != (tt.status != 413) || rec.Body.String() != tt.body {
					t.Fatalf("answer %d Retry-After %q body %q; want %d (Retry-After unless 413), body %q",
						rec.Code, rec.Header().Get("Retry-After"), rec.Body, tt.status, tt.body)
				}
			}
			log := logs.String()
			var lines []string
			for l := range strings.Lines(log) {
				if strings.Contains(l, secret) {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "broker=ns/b") {
				t.Errorf("%d log lines with the backend's error, want one warning naming the broker:\n%s", len(lines), log)
			}
		})
	}
}

// counter reads a counter's value.
func counter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestIngressAttributeLimit: a structured event of 50,000 extensions (under the body
// limit) is refused 400 with a reason naming the attribute limit, and counted invalid;
// one within the limit is accepted.
func TestIngressAttributeLimit(t *testing.T) {
	s := newTestServer(t, nil)
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker())); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	body := func(exts int) string {
		var b strings.Builder
		b.WriteString(`{"specversion":"1.0","id":"1","source":"/test","type":"t"`)
		for i := range exts {
			fmt.Fprintf(&b, `,"x%d":"v"`, i)
		}
		b.WriteString("}")
		return b.String()
	}
	ct := map[string]string{"Content-Type": "application/cloudevents+json"}
	before := counter(s.metrics.rejected.WithLabelValues("ns/b", "invalid"))
	rec := post(h, "POST", "/ns/b", ct, body(50000))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "more than 400 attributes") {
		t.Fatalf("50,000 extensions: %d %q, want 400 naming the limit", rec.Code, rec.Body)
	}
	if d := counter(s.metrics.rejected.WithLabelValues("ns/b", "invalid")) - before; d != 1 {
		t.Errorf("requests_rejected_total{reason=\"invalid\"} rose by %v, want 1", d)
	}
	if rec := post(h, "POST", "/ns/b", ct, body(396)); rec.Code != http.StatusAccepted {
		t.Fatalf("400 attributes: %d %q, want 202", rec.Code, rec.Body)
	}
}

// budgetFull is a body of unknown length that the server's in-flight body budget cut
// short (httpserver.ErrBodyBudget, known to broker only by its StatusCode), after some bytes.
type budgetFull struct{ sent bool }

func (b *budgetFull) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"n":`), nil
	}
	return 0, httpserver.ErrBodyBudget
}

// TestBodyBudgetFullIs503: a body of unknown length the server's budget had no room for
// is answered 503 with Retry-After, not 400.
func TestBodyBudgetFullIs503(t *testing.T) {
	s := newTestServer(t, memory.NewBudget(1<<20))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker())); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/ns/b", &budgetFull{})
	for k, v := range binary("chunked") {
		req.Header.Set(k, v)
	}
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "--max-inflight-body-bytes") {
		t.Errorf("%d Retry-After %q %q; want 503, 1, naming --max-inflight-body-bytes", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}
