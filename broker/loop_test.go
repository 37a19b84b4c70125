package broker

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// loopSubscriber answers every event with a reply of the same type, so that each reply
// is delivered to it again: an event loop only the TTL or the rate can stop. It counts
// the deliveries it got.
func loopSubscriber(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		h := w.Header()
		h.Set("Ce-Specversion", "1.0")
		h.Set("Ce-Id", fmt.Sprintf("reply-%d", n))
		h.Set("Ce-Source", "/loop")
		h.Set("Ce-Type", "t")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(sub.Close)
	return sub, &calls
}

// counterSum is the sum of the counter called name (every label set) in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestTTLCappedAtIngress: an event sent with knativebrokerttl 1000 to a subscriber that
// replies to everything is delivered 255 times (Knative's default TTL), not 1000: the
// ingress lowers the TTL, and the loop guard stops the 255th reply.
func TestTTLCappedAtIngress(t *testing.T) {
	sub, calls := loopSubscriber(t)
	reg := prometheus.NewRegistry()
	s := newTestServer(t, nil, WithRegisterer(reg))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("loop", "t", sub.URL))); err != nil {
		t.Fatal(err)
	}
	rec := post(s.Handler(), http.MethodPost, "/ns/b", binary("e1", "Ce-Knativebrokerttl", "1000"), "{}")
	if rec.Code != http.StatusAccepted {
		t.Fatalf("ingress: %d %s", rec.Code, rec.Body)
	}
	sluicetest.Eventually(t, 60*time.Second, "the loop stopped", func() bool {
		return counterSum(t, reg, "sluice_delivery_loop_stopped_total") == 1
	})
	if n := calls.Load(); n != 255 {
		t.Errorf("the subscriber got %d deliveries from one event; want 255 (the TTL's cap)", n)
	}
}

// TestRepliesCountAgainstMaxRate: replies take tokens of the broker's sluice.dev/max-rate
// like events sent from outside. At 0.01 events/s the one token the bucket holds goes to
// the event sent; each reply of the looping subscriber would wait 100 s for the next,
// more than a reply waits, so each delivery fails, is retried (twice), and the event is
// dead-lettered naming the rate: three deliveries, where the loop otherwise makes 255.
func TestRepliesCountAgainstMaxRate(t *testing.T) {
	sub, calls := loopSubscriber(t)
	var mu sync.Mutex
	var dead []http.Header
	dls := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		dead = append(dead, r.Header.Clone())
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer dls.Close()
	s := newTestServer(t, nil)
	cfg := fmt.Sprintf(brokerDoc, `, annotations: {sluice.dev/max-rate: "0.01"}`) +
		"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: loop, namespace: ns}\n" +
		"spec: {broker: b, filter: {attributes: {type: t}}, subscriber: {uri: \"" + sub.URL + "\"},\n" +
		"  delivery: {retry: 2, backoffPolicy: linear, backoffDelay: PT0.01S, deadLetterSink: {uri: \"" + dls.URL + "\"}}}\n"
	if err := s.Apply(context.Background(), loadConfig(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if rec := post(s.Handler(), http.MethodPost, "/ns/b", binary("e1"), "{}"); rec.Code != http.StatusAccepted {
		t.Fatalf("ingress: %d %s", rec.Code, rec.Body)
	}
	sluicetest.Eventually(t, 60*time.Second, "dead-lettered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dead) > 0
	})
	if n := calls.Load(); n != 3 {
		t.Errorf("the subscriber got %d deliveries; want 3 (the event and its 2 retries)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0].Get("Ce-Id") != "e1" {
		t.Fatalf("dead letters %v; want event e1 once", dead)
	}
	data, _ := base64.StdEncoding.DecodeString(dead[0].Get("Ce-Knativeerrordata"))
	if !strings.Contains(string(data), "sluice.dev/max-rate") {
		t.Errorf("knativeerrordata %q does not name sluice.dev/max-rate", data)
	}
}
