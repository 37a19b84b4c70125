package ping

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/channel/registry"
	"github.com/sluice-broker/sluice/config"
)

// collector is a real HTTP subscriber that keeps the CloudEvents it receives, read with
// cloudevents/sdk-go as a Knative user's service would.
type collector struct {
	*httptest.Server
	mu     sync.Mutex
	events []cloudevents.Event
	status int
	got    chan struct{}
}

func newCollector(t *testing.T, status int) *collector {
	c := &collector{status: status, got: make(chan struct{}, 100)}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cloudevents.NewEventFromHTTPRequest(r)
		if err != nil {
			t.Errorf("not a CloudEvent: %v", err)
			w.WriteHeader(400)
			return
		}
		c.mu.Lock()
		c.events = append(c.events, *ev)
		st := c.status
		c.mu.Unlock()
		w.WriteHeader(st)
		c.got <- struct{}{}
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) wait(t *testing.T, n int, within time.Duration) []cloudevents.Event {
	t.Helper()
	deadline := time.After(within)
	for {
		c.mu.Lock()
		if len(c.events) >= n {
			evs := append([]cloudevents.Event(nil), c.events...)
			c.mu.Unlock()
			return evs
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline:
			t.Fatalf("%d events in %s, want %d", len(c.events), within, n)
		}
	}
}

func newRunner(t *testing.T, opts ...Option) *Runner {
	t.Helper()
	r, err := New(append([]Option{WithSecondsField()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func TestPingEvent(t *testing.T) {
	sink := newCollector(t, http.StatusAccepted)
	r := newRunner(t)
	src := config.PingSource{Namespace: "demo", Name: "every-second", Schedule: "* * * * * *",
		ContentType: "application/json", Data: []byte(`{"message": "Hello world!"}`),
		Extensions: map[string]string{"region": "eu"}, Sink: sink.URL + "/hook"}
	if err := r.Apply([]config.PingSource{src}); err != nil {
		t.Fatal(err)
	}
	evs := sink.wait(t, 2, 30*time.Second)
	e := evs[0]
	if e.Type() != EventType || e.Source() != "/apis/v1/namespaces/demo/pingsources/every-second" ||
		e.DataContentType() != "application/json" || string(e.Data()) != `{"message": "Hello world!"}` ||
		e.Extensions()["region"] != "eu" || e.ID() == "" || e.ID() == evs[1].ID() {
		t.Errorf("event %v", e)
	}
	// One tick a second at least a second apart; a loaded machine may fire a tick late,
	// so the ceiling only bounds a hang.
	if d := evs[1].Time().Sub(e.Time()); d < 500*time.Millisecond || d > 20*time.Second {
		t.Errorf("ticks %s apart, want a second or more", d)
	}
	// A removed source stops.
	if err := r.Apply(nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a send of the last tick may be in flight, on a loaded machine for long
	sink.mu.Lock()
	n := len(sink.events)
	sink.mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.events) != n {
		t.Errorf("%d events after removal", len(sink.events)-n)
	}
}

func TestPingRetries(t *testing.T) {
	sink := newCollector(t, http.StatusServiceUnavailable)
	r := newRunner(t, WithRetries(2, 50*time.Millisecond))
	if err := r.Apply([]config.PingSource{{Namespace: "d", Name: "p", Schedule: "*/5 * * * * *", Sink: sink.URL}}); err != nil {
		t.Fatal(err)
	}
	evs := sink.wait(t, 3, 30*time.Second)
	if evs[0].ID() != evs[1].ID() || evs[1].ID() != evs[2].ID() {
		t.Errorf("retries of one tick carry different ids: %s %s %s", evs[0].ID(), evs[1].ID(), evs[2].ID())
	}
}

func TestPingBadSchedule(t *testing.T) {
	r := newRunner(t)
	err := r.Apply([]config.PingSource{{Namespace: "d", Name: "p", Schedule: "every minute", Sink: "http://127.0.0.1:9/"}})
	if err == nil || !strings.Contains(err.Error(), "PingSource d/p") {
		t.Errorf("err = %v", err)
	}
}

// TestPingIntoBroker fires a PingSource into a real broker, whose trigger (filtering on
// the ping type, as Knative's samples do) delivers to a real subscriber.
func TestPingIntoBroker(t *testing.T) {
	sub := newCollector(t, http.StatusOK)
	reg := registry.New()
	if err := reg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv, err := broker.NewServer(broker.WithChannelOpener(reg.Open))
	if err != nil {
		t.Fatal(err)
	}
	ingress := httptest.NewServer(srv.Handler())
	defer ingress.Close()
	defer srv.Shutdown(context.Background())
	dir := t.TempDir()
	yaml := `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: ping}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: pings, namespace: ping}
spec:
  broker: default
  filter: {attributes: {type: dev.knative.sources.ping}}
  subscriber: {uri: "` + sub.URL + `/"}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: heartbeat, namespace: ping}
spec:
  schedule: "* * * * *"
  data: '{"beat": 1}'
  contentType: application/json
  sink:
    ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: default}
`
	if err := writeFile(dir+"/c.yaml", yaml); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir+"/c.yaml", config.WithIngressURL(ingress.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	ps := cfg.PingSources
	if len(ps) != 1 || ps[0].Sink != ingress.URL+"/ping/default" {
		t.Fatalf("ping sources %+v", ps)
	}
	// The configuration's schedule fires once a minute; the test runs the same source
	// every second.
	ps[0].Schedule = "* * * * * *"
	r := newRunner(t)
	if err := r.Apply(ps); err != nil {
		t.Fatal(err)
	}
	e := sub.wait(t, 1, 5*time.Second)[0]
	if e.Type() != EventType || e.Source() != "/apis/v1/namespaces/ping/pingsources/heartbeat" || string(e.Data()) != `{"beat": 1}` {
		t.Errorf("event %v", e)
	}
	if _, ok := e.Extensions()["knativearrivaltime"]; !ok {
		t.Errorf("no knativearrivaltime on the event the broker delivered: %v", e)
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

// TestPingOwnIngressIdentity: a PingSource whose sink is at the own-ingress origin sends
// the authorization WithOwnIngress gives it; one whose sink is elsewhere sends none.
func TestPingOwnIngressIdentity(t *testing.T) {
	type hit struct{ path, authz string }
	hits := make(chan hit, 100)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- hit{r.URL.Path, r.Header.Get("Authorization")}
		w.WriteHeader(http.StatusAccepted)
	})
	own, elsewhere := httptest.NewServer(handler), httptest.NewServer(handler)
	defer own.Close()
	defer elsewhere.Close()
	r := newRunner(t, WithOwnIngress(own.URL, func(src config.PingSource) string { return "Bearer id-of-" + src.Name }))
	if err := r.Apply([]config.PingSource{
		{Namespace: "d", Name: "mine", Schedule: "* * * * * *", Sink: own.URL + "/d/broker"},
		{Namespace: "d", Name: "theirs", Schedule: "* * * * * *", Sink: elsewhere.URL + "/d/broker-theirs"},
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/d/broker": "Bearer id-of-mine", "/d/broker-theirs": ""}
	seen := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for len(seen) < 2 {
		select {
		case h := <-hits:
			if h.authz != want[h.path] {
				t.Fatalf("%s got Authorization %q, want %q", h.path, h.authz, want[h.path])
			}
			seen[h.path] = true
		case <-deadline:
			t.Fatalf("pings seen in 20s: %v", seen)
		}
	}
}
