package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPingSourceDenyEgress: a PingSource whose sink is in --deny-egress is refused at the
// dial, as deliveries are: the sink never sees a request, and the log says why.
func TestPingSourceDenyEgress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0") // Linux answers on all of 127.0.0.0/8
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	var hits atomic.Int64
	sink := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	})}}
	sink.Start()
	t.Cleanup(sink.Close)
	cfg := writeConfig(t, fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: ping}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: heartbeat, namespace: ping}
spec:
  schedule: "@every 1s"
  data: '{"message": "Hello world!"}'
  sink: {uri: %q}
`, sink.URL))
	b := startBroker(t, "--config", cfg, "--deny-egress", "127.0.0.2/32")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(b.logs.String(), "egress denied") {
		if time.Now().After(deadline) {
			t.Fatalf("no ping was refused in 15 s; log:\n%s", b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the denied sink got %d requests", n)
	}
}
