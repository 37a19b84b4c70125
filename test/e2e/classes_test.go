package e2e

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDeliveryFormatJSON: a broker whose spec.delivery says format: json delivers in
// structured mode — the event as JSON in the body, Content-Type
// application/cloudevents+json, no ce- headers — to its subscribers and its dead-letter
// sink; a trigger's format: binary overrides it.
func TestDeliveryFormatJSON(t *testing.T) {
	structured := newSubscriber(t, nil)
	binary := newSubscriber(t, nil)
	failing := newSubscriber(t, func(*http.Request, int) int { return http.StatusInternalServerError })
	dls := newSubscriber(t, nil)
	cfg := `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: default}
spec:
  delivery: {format: json, retry: 0, deadLetterSink: {uri: "` + dls.URL + `"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: structured, namespace: default}
spec: {broker: default, filter: {attributes: {type: ok}}, subscriber: {uri: "` + structured.URL + `"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: binary, namespace: default}
spec: {broker: default, filter: {attributes: {type: ok}}, subscriber: {uri: "` + binary.URL + `"}, delivery: {format: binary}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: failing, namespace: default}
spec: {broker: default, filter: {attributes: {type: fail}}, subscriber: {uri: "` + failing.URL + `"}}
`
	b := startBroker(t, "--config", writeConfig(t, cfg))
	for id, typ := range map[string]string{"1": "ok", "2": "fail"} {
		if status, body := postBinary(t, b.base+"/default/default", ceHeaders(id, typ), []byte(`{"n":`+id+`}`)); status != 202 {
			t.Fatalf("%d %s", status, body)
		}
	}
	type ce struct {
		SpecVersion, ID, Source, Type, DataContentType string
		Data                                           json.RawMessage
		KnativeErrorCode                               string `json:"knativeerrorcode"`
	}
	read := func(who string, r received) ce {
		t.Helper()
		if ct := r.Header.Get("Content-Type"); ct != "application/cloudevents+json" {
			t.Errorf("%s: Content-Type %q, want application/cloudevents+json", who, ct)
		}
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "ce-") {
				t.Errorf("%s: binary-mode header %s in a structured delivery", who, k)
			}
		}
		var e ce
		if err := json.Unmarshal(r.Body, &e); err != nil {
			t.Fatalf("%s: body %q: %v", who, r.Body, err)
		}
		return e
	}
	if e := read("subscriber", structured.waitFor(t, 1, 30*time.Second)[0]); e.ID != "1" || e.Type != "ok" || e.Source != "/e2e" ||
		e.DataContentType != "application/json" || string(e.Data) != `{"n":1}` {
		t.Errorf("structured delivery: %+v", e)
	}
	if r := binary.waitFor(t, 1, 30*time.Second)[0]; r.Header.Get("Ce-Id") != "1" || string(r.Body) != `{"n":1}` {
		t.Errorf("the binary trigger got %v %q", r.Header, r.Body)
	}
	if e := read("dead-letter sink", dls.waitFor(t, 1, 30*time.Second)[0]); e.ID != "2" || e.KnativeErrorCode != "500" || string(e.Data) != `{"n":2}` {
		t.Errorf("dead letter: %+v", e)
	}
}

// TestNatsJetStreamBroker: a Broker of class NatsJetStreamBroker runs on the jetstream
// channel (an embedded NATS server under --data-dir while --channel stays memory), and
// its natsjetstream.eventing.knative.dev/config stream maxBytes bounds its stream: once
// the events its failing subscriber holds fill it, ingress answers 429.
func TestNatsJetStreamBroker(t *testing.T) {
	sub := newSubscriber(t, nil)
	stuck := newSubscriber(t, func(*http.Request, int) int { return http.StatusServiceUnavailable })
	cfg := `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: nats
  namespace: default
  annotations: {eventing.knative.dev/broker.class: NatsJetStreamBroker}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: default}
spec: {broker: nats, subscriber: {uri: "` + sub.URL + `"}}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: small
  namespace: default
  annotations:
    eventing.knative.dev/broker.class: NatsJetStreamBroker
    natsjetstream.eventing.knative.dev/config: '{"stream": {"maxBytes": 8192}}'
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: stuck, namespace: default}
spec: {broker: small, subscriber: {uri: "` + stuck.URL + `"}, delivery: {retry: 100, backoffDelay: PT1M}}
`
	b := startBroker(t, "--config", writeConfig(t, cfg), "--data-dir", t.TempDir())
	if status, body := postBinary(t, b.base+"/default/nats", ceHeaders("1", "t"), []byte(`{}`)); status != 202 {
		t.Fatalf("%d %s", status, body)
	}
	if r := sub.waitFor(t, 1, 30*time.Second)[0]; r.Header.Get("Ce-Id") != "1" {
		t.Errorf("got %v", r.Header)
	}
	if n := b.metric(`sluice_jetstream_published_messages_total{broker="default/nats"}`); n != 1 {
		t.Errorf("the nats broker's jetstream stream stored %v messages, want 1", n)
	}
	data := []byte(`"` + strings.Repeat("x", 1000) + `"`)
	accepted, full := 0, 0
	for i := range 40 { // 40 KB: far past the 8 KiB bound
		status, body := postBinary(t, b.base+"/default/small", ceHeaders("s"+strconv.Itoa(i), "t"), data)
		switch status {
		case 202:
			accepted++
		case 429:
			full++
		default:
			t.Fatalf("event %d: %d %s", i, status, body)
		}
	}
	if accepted == 0 || accepted >= 9 || full == 0 {
		t.Errorf("%d accepted and %d refused with 429 into a stream of 8192 bytes; want 1 to 8 accepted, the rest refused", accepted, full)
	}
}
