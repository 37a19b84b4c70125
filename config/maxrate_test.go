package config

import (
	"strings"
	"testing"
)

func TestMaxRateAnnotation(t *testing.T) {
	cfg := loadString(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a, annotations: {sluice.dev/max-rate: "250.5"}}
---
apiVersion: messaging.knative.dev/v1
kind: InMemoryChannel
metadata: {name: c, namespace: a, annotations: {sluice.dev/max-rate: "10"}}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: bad, namespace: a, annotations: {sluice.dev/max-rate: "-1"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: a, annotations: {sluice.dev/max-rate: "5"}}
spec: {broker: b, subscriber: {uri: "http://x/"}}
`)
	rates := map[string]float64{}
	for _, b := range cfg.Brokers {
		rates[b.Key()] = b.MaxRate
	}
	if rates["a/b"] != 250.5 || rates["a/c"] != 10 {
		t.Errorf("rates %v", rates)
	}
	for _, o := range cfg.Objects {
		switch o.Name {
		case "bad":
			if o.Ready || !strings.Contains(o.Reason, `sluice.dev/max-rate: "-1" is not a positive number`) {
				t.Errorf("bad: %+v", o)
			}
		case "t":
			if o.Ready || !strings.Contains(o.Reason, "only for Brokers and channels") {
				t.Errorf("trigger: %+v", o)
			}
		}
	}
}
