package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTriggerBrokerRefAcrossNamespaces: through `sluice serve`, a Trigger of namespace
// apps whose spec.brokerRef names the Broker shop/orders receives what is posted to that
// broker; a PingSource whose sink names a Broker that is not in the configuration is not
// run (no address is invented for it; /status says it is not ready, and why), and the
// rest runs.
func TestTriggerBrokerRefAcrossNamespaces(t *testing.T) {
	sub := newSubscriber(t, nil)
	cfg := writeConfig(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: orders, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: audit, namespace: apps}
spec:
  brokerRef: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: orders, namespace: shop}
  subscriber: {uri: "`+sub.URL+`"}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: tick, namespace: apps}
spec:
  schedule: "@every 1s"
  sink: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: missing}}
`)
	b := startBroker(t, "--config", cfg)
	waitLog(t, b, "spec.sink.ref: Broker apps/missing is not in the configuration or --refs")
	// /status says the PingSource is not ready, and why; the Trigger it does not stop is.
	resp, err := http.Get(b.base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Objects []objectStatus }
	err = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	state := map[string]objectStatus{}
	for _, o := range rep.Objects {
		state[o.Kind+" "+o.Namespace+"/"+o.Name] = o
	}
	if tick, ok := state["PingSource apps/tick"]; !ok || tick.Ready || tick.Skipped ||
		!strings.Contains(tick.Reason, "spec.sink.ref: Broker apps/missing is not in the configuration") {
		t.Errorf("GET /status: PingSource apps/tick %+v (listed %v); want not ready, naming the missing Broker", tick, ok)
	}
	if audit := state["Trigger apps/audit"]; !audit.Ready {
		t.Errorf("GET /status: Trigger apps/audit %+v, want ready", audit)
	}
	if st, body := postBinary(t, b.base+"/shop/orders", ceHeaders("1", "order.created"), []byte(`{}`)); st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	got := sub.waitFor(t, 1, 30*time.Second)[0]
	if got.Header.Get("Ce-Id") != "1" || got.Header.Get("Ce-Type") != "order.created" {
		t.Errorf("delivered %v", got.Header)
	}
	if st, _ := postBinary(t, b.base+"/apps/orders", ceHeaders("2", "x"), []byte(`{}`)); st != 404 {
		t.Errorf("no broker apps/orders: got %d, want 404", st)
	}
}
