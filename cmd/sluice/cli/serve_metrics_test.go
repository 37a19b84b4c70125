package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// uncheckedCollector describes nothing, so a registry takes it unchecked.
type uncheckedCollector struct{ desc *prometheus.Desc }

func (uncheckedCollector) Describe(chan<- *prometheus.Desc) {}
func (u uncheckedCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, 7)
}

// TestGatherInSequence: the sequential gatherer serves exactly what the registry's own
// Gather does, including collectors registered after it was made and unchecked ones.
func TestGatherInSequence(t *testing.T) {
	reg := prometheus.NewRegistry()
	before := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_before_total", Help: "before"}, []string{"k"})
	reg.MustRegister(before, collectors.NewGoCollector())
	g := gatherInSequence(reg)
	after := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_after", Help: "after"})
	reg.MustRegister(after, uncheckedCollector{prometheus.NewDesc("t_unchecked", "unchecked", nil, nil)})
	before.WithLabelValues("a").Add(2)
	before.WithLabelValues("b").Inc()
	after.Set(3)

	text := func(g prometheus.Gatherer) string {
		t.Helper()
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "go_") { // their values move between two gathers
				fmt.Fprintf(&b, "# TYPE %s %s\n", mf.GetName(), strings.ToLower(mf.GetType().String()))
				continue
			}
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	want, got := text(reg), text(g)
	if got != want {
		t.Errorf("gathered in sequence:\n%s\nwant (the registry's Gather):\n%s", got, want)
	}
	for _, s := range []string{`t_before_total{k="a"} 2`, `t_after 3`, `t_unchecked 7`, "# TYPE go_goroutines gauge"} {
		if !strings.Contains(got, s) {
			t.Errorf("gathered in sequence: no %q in\n%s", s, got)
		}
	}
}
