package config

import (
	"strings"
	"testing"
)

// TestCapAnnotations: sluice.dev/max-delivery-rate and sluice.dev/max-in-flight (or
// rabbitmq.eventing.knative.dev/parallelism) are read on Triggers; a bad value, or either on another kind, makes the object not ready with a
// reason naming the annotation; the caps are part of what a reload compares.
func TestCapAnnotations(t *testing.T) {
	tests := []struct {
		name   string
		kind   string // Trigger (default) or Broker
		ann    string // the annotations, as YAML flow mapping entries
		want   Caps
		reason string // "" when the object is ready
	}{
		{"none", "", ``, Caps{}, ""},
		{"rate", "", `sluice.dev/max-delivery-rate: "50"`, Caps{Rate: 50}, ""},
		{"fractional rate", "", `sluice.dev/max-delivery-rate: "0.5"`, Caps{Rate: 0.5}, ""},
		{"min rate", "", `sluice.dev/max-delivery-rate: "0.001"`, Caps{Rate: 0.001}, ""},
		{"max rate", "", `sluice.dev/max-delivery-rate: "1e6"`, Caps{Rate: 1e6}, ""},
		{"in flight", "", `sluice.dev/max-in-flight: "2"`, Caps{InFlight: 2}, ""},
		{"both", "", `sluice.dev/max-delivery-rate: "10", sluice.dev/max-in-flight: "1"`, Caps{Rate: 10, InFlight: 1}, ""},
		{"zero rate", "", `sluice.dev/max-delivery-rate: "0"`, Caps{}, `sluice.dev/max-delivery-rate: "0" is not a number of events a second from 0.001 to 1e+06`},
		{"negative rate", "", `sluice.dev/max-delivery-rate: "-5"`, Caps{}, `sluice.dev/max-delivery-rate: "-5" is not`},
		{"tiny rate", "", `sluice.dev/max-delivery-rate: "0.0001"`, Caps{}, `sluice.dev/max-delivery-rate: "0.0001" is not`},
		{"huge rate", "", `sluice.dev/max-delivery-rate: "1e7"`, Caps{}, `sluice.dev/max-delivery-rate: "1e7" is not`},
		{"NaN rate", "", `sluice.dev/max-delivery-rate: "NaN"`, Caps{}, `sluice.dev/max-delivery-rate: "NaN" is not`},
		{"Inf rate", "", `sluice.dev/max-delivery-rate: "+Inf"`, Caps{}, `sluice.dev/max-delivery-rate: "+Inf" is not`},
		{"word rate", "", `sluice.dev/max-delivery-rate: "fast"`, Caps{}, `sluice.dev/max-delivery-rate: "fast" is not`},
		{"empty rate", "", `sluice.dev/max-delivery-rate: ""`, Caps{}, `sluice.dev/max-delivery-rate: "" is not`},
		{"zero in flight", "", `sluice.dev/max-in-flight: "0"`, Caps{}, `sluice.dev/max-in-flight: "0" is not a whole number of at least 1`},
		{"negative in flight", "", `sluice.dev/max-in-flight: "-1"`, Caps{}, `sluice.dev/max-in-flight: "-1" is not`},
		{"fractional in flight", "", `sluice.dev/max-in-flight: "1.5"`, Caps{}, `sluice.dev/max-in-flight: "1.5" is not`},
		{"huge in flight", "", `sluice.dev/max-in-flight: "99999999999999999999"`, Caps{}, `sluice.dev/max-in-flight: "99999999999999999999" is not`},
		{"empty in flight", "", `sluice.dev/max-in-flight: ""`, Caps{}, `sluice.dev/max-in-flight: "" is not`},
		// eventing-rabbitmq's annotation is the in-flight cap, within Knative's bounds.
		{"parallelism", "", `rabbitmq.eventing.knative.dev/parallelism: "10"`, Caps{InFlight: 10}, ""},
		{"parallelism 1", "", `rabbitmq.eventing.knative.dev/parallelism: "1"`, Caps{InFlight: 1}, ""},
		{"parallelism max", "", `rabbitmq.eventing.knative.dev/parallelism: "1000"`, Caps{InFlight: 1000}, ""},
		{"parallelism 0", "", `rabbitmq.eventing.knative.dev/parallelism: "0"`, Caps{}, `rabbitmq.eventing.knative.dev/parallelism: "0" is not a whole number from 1 to 1000`},
		{"parallelism too high", "", `rabbitmq.eventing.knative.dev/parallelism: "1001"`, Caps{}, `rabbitmq.eventing.knative.dev/parallelism: "1001" is not a whole number from 1 to 1000`},
		{"parallelism word", "", `rabbitmq.eventing.knative.dev/parallelism: "many"`, Caps{}, `rabbitmq.eventing.knative.dev/parallelism: "many" is not`},
		{"parallelism and in flight", "", `rabbitmq.eventing.knative.dev/parallelism: "10", sluice.dev/max-in-flight: "4"`, Caps{},
			"rabbitmq.eventing.knative.dev/parallelism: give it or sluice.dev/max-in-flight, not both"},
		{"parallelism on a broker", "Broker", `rabbitmq.eventing.knative.dev/parallelism: "5"`, Caps{}, "rabbitmq.eventing.knative.dev/parallelism: only for Triggers"},
		{"rate on a broker", "Broker", `sluice.dev/max-delivery-rate: "5"`, Caps{}, "sluice.dev/max-delivery-rate: only for Triggers"},
		{"in flight on a broker", "Broker", `sluice.dev/max-in-flight: "5"`, Caps{}, "sluice.dev/max-in-flight: only for Triggers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bann, tann := "", tt.ann
			if tt.kind == "Broker" {
				bann, tann = tt.ann, ""
			}
			cfg := loadString(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a, annotations: {`+bann+`}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: a, annotations: {`+tann+`}}
spec: {broker: b, subscriber: {uri: "http://x/"}}
`)
			kind := tt.kind
			if kind == "" {
				kind = "Trigger"
			}
			for _, o := range cfg.Objects {
				if o.Kind != kind {
					continue
				}
				if tt.reason == "" && !o.Ready || tt.reason != "" && (o.Ready || !strings.Contains(o.Reason, tt.reason)) {
					t.Fatalf("%s: ready %v, reason %q; want %q", o.Kind, o.Ready, o.Reason, tt.reason)
				}
			}
			if tt.reason == "" {
				if len(cfg.Brokers) != 1 || len(cfg.Brokers[0].Triggers) != 1 || cfg.Brokers[0].Triggers[0].Caps != tt.want {
					t.Fatalf("brokers %+v, want caps %+v", cfg.Brokers, tt.want)
				}
			}
		})
	}
	capped := Trigger{Name: "t", Caps: Caps{InFlight: 2}}
	if capped.Equal(Trigger{Name: "t"}) || capped.Equal(Trigger{Name: "t", Caps: Caps{InFlight: 3}}) {
		t.Error("triggers with other caps are equal: a reload would not apply the annotation")
	}
}
