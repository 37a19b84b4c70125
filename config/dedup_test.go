package config

import (
	"strings"
	"testing"
	"time"
)

// TestDedupWindowAnnotation: sluice.dev/dedup-window takes a Go or ISO-8601 duration
// from 0 to 24h on Brokers and channels; anything else fails the object, naming the
// annotation.
func TestDedupWindowAnnotation(t *testing.T) {
	tests := []struct {
		name   string
		kind   string // Broker (default) or Trigger
		value  string
		want   time.Duration
		reason string // "" when the object is ready
	}{
		{"go minutes", "", "5m", 5 * time.Minute, ""},
		{"go compound", "", "1h30m", 90 * time.Minute, ""},
		{"iso", "", "PT10S", 10 * time.Second, ""},
		{"zero is off", "", "0", 0, ""},
		{"max", "", "24h", 24 * time.Hour, ""},
		{"over max", "", "25h", 0, `sluice.dev/dedup-window: "25h": want 0 (off) up to 24h`},
		{"negative", "", "-1m", 0, `sluice.dev/dedup-window: "-1m": want 0 (off) up to 24h`},
		{"no unit", "", "5", 0, `sluice.dev/dedup-window: "5" is not a duration`},
		{"garbage", "", "soon", 0, `sluice.dev/dedup-window: "soon" is not a duration`},
		{"bad iso", "", "P1M", 0, `sluice.dev/dedup-window: "P1M" is not a duration`},
		{"empty", "", "", 0, `sluice.dev/dedup-window: "" is not a duration`},
		{"on a trigger", "Trigger", "5m", 0, "sluice.dev/dedup-window: only for Brokers and channels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a, annotations: {sluice.dev/dedup-window: "` + tt.value + `"}}
`
			if tt.kind == "Trigger" {
				doc = `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: a, annotations: {sluice.dev/dedup-window: "` + tt.value + `"}}
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
				if len(cfg.Brokers) != 1 || cfg.Brokers[0].DedupWindow != tt.want {
					t.Fatalf("brokers %+v, want a window of %v", cfg.Brokers, tt.want)
				}
			}
		})
	}
}

// TestPausedAnnotation: sluice.dev/paused is "true" or "false" on Triggers and
// Subscriptions; it is part of what a reload compares.
func TestPausedAnnotation(t *testing.T) {
	tests := []struct {
		value  string
		want   bool
		reason string
	}{
		{"true", true, ""},
		{"false", false, ""},
		{"yes", false, `sluice.dev/paused: "yes" is not true or false`},
		{"TRUE", false, `sluice.dev/paused: "TRUE" is not true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			cfg := loadString(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: a}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: other, namespace: a, annotations: {sluice.dev/paused: "true"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: a, annotations: {sluice.dev/paused: "`+tt.value+`"}}
spec: {broker: b, subscriber: {uri: "http://x/"}}
`)
			for _, o := range cfg.Objects {
				switch o.Kind {
				case "Broker":
					if o.Name == "other" && (o.Ready || !strings.Contains(o.Reason, "sluice.dev/paused: only for Triggers and Subscriptions")) {
						t.Errorf("broker: %+v", o)
					}
				case "Trigger":
					if tt.reason == "" && !o.Ready || tt.reason != "" && (o.Ready || !strings.Contains(o.Reason, tt.reason)) {
						t.Errorf("trigger: ready %v, reason %q; want %q", o.Ready, o.Reason, tt.reason)
					}
				}
			}
			if tt.reason == "" {
				if len(cfg.Brokers) != 1 || len(cfg.Brokers[0].Triggers) != 1 || cfg.Brokers[0].Triggers[0].Paused != tt.want {
					t.Errorf("brokers %+v, want the trigger paused: %v", cfg.Brokers, tt.want)
				}
			}
		})
	}
	on := Trigger{Name: "t", Paused: true}
	if on.Equal(Trigger{Name: "t"}) {
		t.Error("a paused trigger equals an unpaused one: a reload would not apply the annotation")
	}
}
