package sluicetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/pacer"
)

// answerByID is a broker stand-in that answers event n by n mod 5: 0, 1 → 202; 2 → 503
// with Retry-After; 3 → 503 without; 4 → 400 with a body. It counts the ids it saw.
func answerByID(t *testing.T) (*httptest.Server, func() map[string]int) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("ce-id")
		if r.Header.Get("ce-specversion") != "1.0" || r.Header.Get("ce-type") != "t" || r.Header.Get("ce-source") != "/s" {
			http.Error(w, "not a CloudEvent", http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[id]++
		mu.Unlock()
		n, _ := strconv.Atoi(id[len("e-"):])
		switch n % 5 {
		case 0, 1:
			w.WriteHeader(http.StatusAccepted)
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 4:
			http.Error(w, "bad event "+id, http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// TestLoadRecords: a schedule of 100 events is sent whole, each once, and every answer is
// recorded: accepted events by number, refusals by status, 503s without Retry-After, the
// last refusal's text.
func TestLoadRecords(t *testing.T) {
	srv, seen := answerByID(t)
	for _, tc := range []struct {
		name    string
		workers int
	}{{"one worker", 1}, {"many workers", 16}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Poster{Client: NewClient(16, 30*time.Second), URL: srv.URL, Type: "t", Source: "/s", Data: []byte("{}"),
				ID: func(n uint64) string { return "e-" + strconv.FormatUint(n, 10) }}
			before := time.Now()
			// MaxLate of a minute: on a loaded machine nothing is skipped, so every count is exact.
			l := Load{Pacer: pacer.Constant{Rate: 1000, Duration: 100 * time.Millisecond}, Workers: tc.workers,
				MaxLate: time.Minute, Send: p.Send}.Start(context.Background())
			done := make(chan struct{})
			go func() { l.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("the load did not end")
			}
			if l.Sent() != 100 || l.Skipped() != 0 || l.Issued() < 100 {
				t.Fatalf("sent %d, skipped %d, issued %d; want 100, 0, ≥100", l.Sent(), l.Skipped(), l.Issued())
			}
			if got, want := l.Codes(), map[int]int{202: 40, 503: 40, 400: 20}; !reflect.DeepEqual(got, want) {
				t.Errorf("codes %v, want %v", got, want)
			}
			if l.Accepted() != 40 || l.Count(503, 400) != 60 || l.NoRetryAfter() != 20 {
				t.Errorf("accepted %d, refused %d, without Retry-After %d; want 40, 60, 20", l.Accepted(), l.Count(503, 400), l.NoRetryAfter())
			}
			if got := l.Refusals(); got != "400×20 503×40" {
				t.Errorf("refusals %q", got)
			}
			if got := l.LastRefusal(); got != "503" && !strings.HasPrefix(got, "400 bad event e-") {
				t.Errorf("last refusal %q, want a status and the body", got)
			}
			acc := l.AcceptedBefore(time.Time{})
			if len(acc) != 40 {
				t.Fatalf("%d accepted numbers, want 40", len(acc))
			}
			for i, n := range acc {
				if n%5 > 1 || (i > 0 && n <= acc[i-1]) || !l.IsAccepted(n) {
					t.Fatalf("accepted numbers %v: want those ≡ 0, 1 mod 5, in order", acc)
				}
			}
			if l.IsAccepted(2) || l.IsAccepted(1000) {
				t.Error("IsAccepted of a refused or unsent event")
			}
			if got := l.AcceptedBefore(before); len(got) != 0 {
				t.Errorf("accepted before the start: %v", got)
			}
			for _, a := range l.Acceptances(time.Time{}) {
				if a.At.Before(before) {
					t.Errorf("event %d accepted at %v, before the start %v", a.N, a.At, before)
				}
			}
			if d := l.FirstAcceptedAfter(before); d < 0 {
				t.Errorf("FirstAcceptedAfter(start) = %v", d)
			}
			if d := l.FirstAcceptedAfter(time.Now().Add(time.Hour)); d != -time.Second {
				t.Errorf("FirstAcceptedAfter(an hour on) = %v, want -1s", d)
			}
		})
	}
	for id, n := range seen() {
		if n != 2 { // once per subtest
			t.Errorf("event %s sent %d times in two runs", id, n)
		}
	}
}

// TestLoadSkipsLate: with one worker held by the first event past the whole schedule,
// every later event falls due more than MaxLate before the worker is free: each is
// skipped, none sent.
func TestLoadSkipsLate(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("ce-id") == "0" {
			<-release
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	p := Poster{Client: NewClient(1, 60*time.Second), URL: srv.URL, Type: "t", Source: "/s"}
	l := Load{Pacer: pacer.Constant{Rate: 100, Duration: 500 * time.Millisecond}, Workers: 1,
		MaxLate: 10 * time.Millisecond, Send: p.Send}.Start(context.Background())
	Eventually(t, 30*time.Second, "event 0 in flight", func() bool { return l.Issued() >= 1 })
	// The last event is due at 490ms; held until 600ms, the worker takes it up ≥ 100ms late.
	time.Sleep(600 * time.Millisecond)
	close(release)
	l.Wait()
	if l.Sent() != 1 || l.Skipped() != 49 || l.Accepted() != 1 {
		t.Errorf("sent %d, skipped %d, accepted %d; want 1, 49, 1", l.Sent(), l.Skipped(), l.Accepted())
	}
}

// TestLoadStop: a load without end sends until Stop, which waits for the events in
// flight; nothing is sent after it returns. No answer (a closed server) counts as 0.
func TestLoadStop(t *testing.T) {
	srv, _ := answerByID(t)
	p := Poster{Client: NewClient(4, 30*time.Second), URL: srv.URL, Type: "t", Source: "/s",
		ID: func(n uint64) string { return "e-" + strconv.FormatUint(n, 10) }}
	l := Load{Pacer: pacer.Constant{Rate: 200}, Workers: 4, Send: p.Send}.Start(context.Background())
	Eventually(t, 30*time.Second, "10 events accepted", func() bool { return l.Accepted() >= 10 })
	l.Stop()
	sent := l.Sent()
	time.Sleep(50 * time.Millisecond)
	if l.Sent() != sent || uint64(sent+l.Skipped()) > l.Issued() {
		t.Errorf("sent %d at Stop, %d after; issued %d", sent, l.Sent(), l.Issued())
	}

	srv.Close()
	l = Load{Pacer: pacer.Constant{Rate: 1000, Duration: 10 * time.Millisecond}, MaxLate: time.Minute, Send: p.Send}.Start(context.Background())
	l.Wait()
	if l.Count(0) != 10 || l.Accepted() != 0 || l.LastRefusal() == "" {
		t.Errorf("against a closed server: %v, last %q; want 10 without an answer and the error", l.Codes(), l.LastRefusal())
	}
}

func TestBrokerYAML(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delivery string
		triggers []Trigger
		want     string
	}{
		{name: "bare", want: "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default, namespace: ns}\n"},
		{name: "delivery and triggers", delivery: "{retry: 3}",
			triggers: []Trigger{{Name: "a", URI: "http://127.0.0.1:1/"}, {Name: "b", Type: "t.b", URI: "http://127.0.0.1:2/"}},
			want: "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default, namespace: ns}\nspec:\n  delivery: {retry: 3}\n" +
				"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: a, namespace: ns}\nspec:\n  broker: default\n  subscriber: {uri: \"http://127.0.0.1:1/\"}\n" +
				"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: b, namespace: ns}\nspec:\n  broker: default\n  filter: {attributes: {type: t.b}}\n  subscriber: {uri: \"http://127.0.0.1:2/\"}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BrokerYAML("ns", tc.delivery, tc.triggers...); got != tc.want {
				t.Errorf("BrokerYAML:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
