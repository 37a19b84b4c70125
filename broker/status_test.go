package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/config"
)

// TestStatus: GET /status reports the load's status of every object, with a broker
// whose channel could not be opened (and its trigger) not ready on top.
func TestStatus(t *testing.T) {
	s := newTestServer(t, nil)
	h := s.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ready":false`) {
		t.Errorf("before Apply: %d %s", rec.Code, rec.Body)
	}
	cfg := loadConfig(t, plainBroker()+triggerDoc("t", "x", "http://127.0.0.1:9/")+
		"---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: js, namespace: ns, annotations: {sluice.dev/channel: jetstream}}\n"+
		"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: on-js, namespace: ns}\nspec: {broker: js, subscriber: {uri: \"http://127.0.0.1:9/\"}}\n")
	if err := s.Apply(context.Background(), cfg); err == nil {
		t.Fatal("Apply of a broker on an unconfigured backend: no error")
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	var rep StatusReport
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range rep.Objects {
		if o.Ready {
			got[o.Key()] = "ready"
		} else {
			got[o.Key()] = o.Reason
		}
	}
	if rep.Ready || got["Broker ns/b"] != "ready" || got["Trigger ns/t"] != "ready" ||
		!strings.Contains(got["Broker ns/js"], "not running: channel backend \"jetstream\" is not configured") ||
		!strings.Contains(got["Trigger ns/on-js"], "its channel ns/js is not running") {
		t.Errorf("status %v (ready %v)", got, rep.Ready)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/status", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /status: %d", rec.Code)
	}
}

func TestKeepChannelSettings(t *testing.T) {
	running := config.Broker{Channel: "kafka", Settings: config.Settings{"data.bootstrap.servers": "a:9092",
		"metadata.annotations.kafka.eventing.knative.dev/external.topic": "t", "data.default.topic.partitions": "3"}}
	same := running
	if err := keepChannelSettings(&same, running); err != nil {
		t.Errorf("no change: %v", err)
	}
	next := config.Broker{Channel: "kafka", Settings: config.Settings{"data.bootstrap.servers": "b:9092",
		"metadata.annotations.kafka.eventing.knative.dev/external.topic": "t", "spec.numPartitions": "6"}}
	err := keepChannelSettings(&next, running)
	if err == nil || !strings.Contains(err.Error(), "data.bootstrap.servers, data.default.topic.partitions, spec.numPartitions") ||
		next.Settings["data.bootstrap.servers"] != "a:9092" || next.Settings["data.default.topic.partitions"] != "3" {
		t.Errorf("err %v, kept %+v", err, next)
	}
}

// TestStatusFlowChannels: a Sequence's channels that could not be opened are not ready
// in its status, each with the reason; those of a Sequence that runs are ready; the
// applied configuration is not changed by it.
func TestStatusFlowChannels(t *testing.T) {
	s := newTestServer(t, nil)
	seq := func(name, ann string) string {
		return "---\napiVersion: flows.knative.dev/v1\nkind: Sequence\nmetadata: {name: " + name + ", namespace: ns" + ann + "}\n" +
			"spec: {steps: [{uri: \"http://127.0.0.1:9/a\"}, {uri: \"http://127.0.0.1:9/b\"}]}\n"
	}
	cfg := loadConfig(t, plainBroker()+seq("ok", "")+seq("js", ", annotations: {sluice.dev/channel: jetstream}"))
	if err := s.Apply(context.Background(), cfg); err == nil {
		t.Fatal("Apply of a sequence on an unconfigured backend: no error")
	}
	for range 2 { // Status changes nothing of what it reports from
		flows := map[string][]config.FlowChannel{}
		for _, o := range s.Status() {
			if o.Kind == "Sequence" {
				flows[o.Name] = o.FlowChannels
			}
		}
		if len(flows["ok"]) != 2 || !flows["ok"][0].Ready || !flows["ok"][1].Ready {
			t.Errorf("the running sequence's channels: %+v", flows["ok"])
		}
		if len(flows["js"]) != 2 {
			t.Fatalf("the sequence on jetstream's channels: %+v", flows["js"])
		}
		for _, ch := range flows["js"] {
			if ch.Ready || !strings.Contains(ch.Reason, `not running: channel backend "jetstream" is not configured`) {
				t.Errorf("the sequence on jetstream's channel %+v: want not ready, naming the backend", ch)
			}
		}
	}
}
