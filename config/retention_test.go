package config

import (
	"strings"
	"testing"
	"time"
)

// TestRetentionAnnotation: sluice.dev/retention takes a Go or ISO-8601 duration from 1m
// to a year on Brokers and channels; anything else fails the object, naming the
// annotation.
func TestRetentionAnnotation(t *testing.T) {
	tests := []struct {
		name   string
		kind   string // Broker (default) or Trigger
		value  string
		want   time.Duration
		reason string // "" when the object is ready
	}{
		{"go hours", "", "168h", 168 * time.Hour, ""},
		{"iso days", "", "P7D", 7 * 24 * time.Hour, ""},
		{"min", "", "1m", time.Minute, ""},
		{"max", "", "8784h", MaxRetention, ""},
		{"below min", "", "30s", 0, `sluice.dev/retention: "30s": want 1m up to 8784h0m0s`},
		{"zero", "", "0", 0, `sluice.dev/retention: "0": want 1m up to`},
		{"over max", "", "9000h", 0, `sluice.dev/retention: "9000h": want 1m up to`},
		{"garbage", "", "a week", 0, `sluice.dev/retention: "a week" is not a duration`},
		{"on a trigger", "Trigger", "168h", 0, "sluice.dev/retention: only for Brokers and channels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a, annotations: {sluice.dev/retention: "` + tt.value + `"}}
`
			if tt.kind == "Trigger" {
				doc = `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: a, annotations: {sluice.dev/retention: "` + tt.value + `"}}
spec: {broker: b, subscriber: {uri: "http://x/"}}
`
			}
			cfg := loadString(t, doc)
			for _, o := range cfg.Objects {
				if o.Kind != "Broker" && tt.kind == "" || o.Kind != tt.kind && tt.kind != "" {
					continue
				}
				if tt.reason == "" && !o.Ready {
					t.Fatalf("%s not ready: %s", o.Name, o.Reason)
				}
				if tt.reason != "" && (o.Ready || !strings.Contains(o.Reason, tt.reason)) {
					t.Fatalf("%s: ready %v, reason %q; want %q", o.Name, o.Ready, o.Reason, tt.reason)
				}
			}
			if tt.reason == "" {
				if len(cfg.Brokers) != 1 || cfg.Brokers[0].Retention != tt.want {
					t.Fatalf("brokers %+v, want a retention of %v", cfg.Brokers, tt.want)
				}
			}
		})
	}
}

// TestStartFromAnnotation: sluice.dev/start-from is latest, earliest or an RFC 3339
// time on Triggers; anything else, or on a Broker, fails the object naming it.
func TestStartFromAnnotation(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		value  string
		want   StartFrom
		reason string
	}{
		{"latest", StartFrom{}, ""},
		{"earliest", StartFrom{Earliest: true}, ""},
		{"2026-11-27T09:00:00Z", StartFrom{Time: at}, ""},
		{"2026-11-27T10:00:00+01:00", StartFrom{Time: at.In(time.FixedZone("", 3600))}, ""},
		{"yesterday", StartFrom{}, `sluice.dev/start-from: "yesterday": want latest, earliest or an RFC 3339 time`},
		{"Earliest", StartFrom{}, `sluice.dev/start-from: "Earliest"`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			cfg := loadString(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a, annotations: {sluice.dev/start-from: "earliest"}}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: ok, namespace: a}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: a, annotations: {sluice.dev/start-from: "`+tt.value+`"}}
spec: {broker: ok, subscriber: {uri: "http://x/"}}
`)
			for _, o := range cfg.Objects {
				switch {
				case o.Kind == "Broker" && o.Name == "b":
					if o.Ready || !strings.Contains(o.Reason, "sluice.dev/start-from: only for Triggers and Subscriptions") {
						t.Errorf("broker: ready %v, reason %q", o.Ready, o.Reason)
					}
				case o.Kind == "Trigger":
					if tt.reason == "" && !o.Ready || tt.reason != "" && (o.Ready || !strings.Contains(o.Reason, tt.reason)) {
						t.Errorf("trigger: ready %v, reason %q; want %q", o.Ready, o.Reason, tt.reason)
					}
				}
			}
			if tt.reason == "" {
				if len(cfg.Brokers) != 1 || len(cfg.Brokers[0].Triggers) != 1 || !cfg.Brokers[0].Triggers[0].StartFrom.Time.Equal(tt.want.Time) ||
					cfg.Brokers[0].Triggers[0].StartFrom.Earliest != tt.want.Earliest {
					t.Errorf("brokers %+v, want the trigger to start from %v", cfg.Brokers, tt.want)
				}
			}
		})
	}
}
