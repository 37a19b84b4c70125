package config

import (
	"testing"

	"github.com/sluice-broker/sluice/event"
)

// TestExampleDemo keeps examples/demo.yaml, which make run serves, loadable and meaning
// what its comments say.
func TestExampleDemo(t *testing.T) {
	cfg := mustLoad(t, "../examples/demo.yaml")
	if len(cfg.Brokers) != 1 || cfg.Brokers[0].Key() != "default/default" {
		t.Fatalf("brokers %+v", cfg.Brokers)
	}
	tr := cfg.Brokers[0].Triggers
	if len(tr) != 2 || tr[0].Key() != "default/perf" || tr[1].Key() != "default/triggermesh-demo" {
		t.Fatalf("triggers %+v", tr)
	}
	for _, x := range tr {
		if x.Delivery != DefaultDelivery() || x.Subscriber != "http://127.0.0.1:9000/" {
			t.Errorf("%s: %+v", x.Key(), x)
		}
	}
	ev := func(typ, source string) *event.Event {
		return &event.Event{SpecVersion: "1.0", ID: "1", Type: typ, Source: source}
	}
	tests := []struct {
		e          *event.Event
		perf, demo bool
	}{
		{ev("io.triggermesh.perf.drill", "/demo/x"), true, true},
		{ev("io.triggermesh.perf.drill", "/other"), true, false},
		{ev("io.triggermesh.other", "/demo"), false, true},
		{ev("com.example", "/demo"), false, false},
	}
	for _, tt := range tests {
		if got := tr[0].Filter.Match(tt.e); got != tt.perf {
			t.Errorf("perf.Match(%v) = %v", tt.e, got)
		}
		if got := tr[1].Filter.Match(tt.e); got != tt.demo {
			t.Errorf("triggermesh-demo.Match(%v) = %v", tt.e, got)
		}
	}
}
