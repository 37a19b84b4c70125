package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReplyChain: subscriber A answers each event with a reply of type b, which the
// broker ingests and routes to trigger B with its data intact.
func TestReplyChain(t *testing.T) {
	subB := newSubscriber(t, nil)
	subA := newSubscriber(t, nil)
	subA.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ce-Specversion", "1.0")
		w.Header().Set("Ce-Id", "reply-"+r.Header.Get("Ce-Id"))
		w.Header().Set("Ce-Source", "/subscriber-a")
		w.Header().Set("Ce-Type", "b")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("reply data ü"))
	})
	b := startBroker(t, "--config", writeConfig(t, brokerYAML("",
		[3]string{"a", "a", subA.URL}, [3]string{"b", "b", subB.URL})))
	if status, body := postBinary(t, b.base+"/default/default", ceHeaders("1", "a"), []byte("{}")); status != 202 {
		t.Fatalf("%d %s", status, body)
	}
	got := subB.waitFor(t, 1, 10*time.Second)
	r := got[0]
	if r.Header.Get("Ce-Id") != "reply-1" || r.Header.Get("Ce-Source") != "/subscriber-a" || string(r.Body) != "reply data ü" ||
		r.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("trigger b got %v %q", r.Header, r.Body)
	}
}

// TestReplyLoopStopsAtTTL: a subscriber that always replies with its own trigger's type
// would loop forever; the knativebrokerttl guard stops it and the broker says so.
func TestReplyLoopStopsAtTTL(t *testing.T) {
	sub := newSubscriber(t, nil)
	var hops int
	sub.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub.mu.Lock()
		hops++
		n := hops
		sub.mu.Unlock()
		w.Header().Set("Ce-Specversion", "1.0")
		w.Header().Set("Ce-Id", "hop-"+strconv.Itoa(n))
		w.Header().Set("Ce-Source", "/loop")
		w.Header().Set("Ce-Type", "loop")
		w.WriteHeader(http.StatusOK)
	})
	b := startBroker(t, "--config", writeConfig(t, brokerYAML("", [3]string{"loop", "loop", sub.URL})))
	headers := ceHeaders("start", "loop")
	headers["ce-knativebrokerttl"] = "10"
	if status, body := postBinary(t, b.base+"/default/default", headers, []byte("{}")); status != 202 {
		t.Fatalf("%d %s", status, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && b.metric("sluice_delivery_loop_stopped_total") < 1 {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	sub.mu.Lock()
	n := hops
	sub.mu.Unlock()
	if n != 10 {
		t.Errorf("the loop ran %d hops, want 10 (the starting TTL)", n)
	}
	if b.metric("sluice_delivery_loop_stopped_total") != 1 {
		t.Errorf("loop-stopped metric = %v, want 1", b.metric("sluice_delivery_loop_stopped_total"))
	}
	if !strings.Contains(strings.ToLower(b.logs.String()), "ttl") {
		t.Errorf("the stopped loop was not logged:\n%s", b.logs)
	}
}
