package jetstream

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes a Channel's metrics, labelled with its broker key. Collecting asks
// the server for each open subscription's lag (see Consumer.Len).
type collector struct {
	ch             *Channel
	lagDesc        *prometheus.Desc
	publishedDesc  *prometheus.Desc
	errorsDesc     *prometheus.Desc
	published      atomic.Uint64
	errFull        atomic.Uint64
	errUnavailable atomic.Uint64
	errTooLarge    atomic.Uint64
}

func newCollector(ch *Channel) *collector {
	labels := prometheus.Labels{"broker": ch.brokerKey}
	return &collector{
		ch: ch,
		lagDesc: prometheus.NewDesc("sluice_jetstream_consumer_lag",
			"Messages stored for a subscription and not yet settled (pending plus delivered unacknowledged).",
			[]string{"subscription"}, labels),
		publishedDesc: prometheus.NewDesc("sluice_jetstream_published_messages_total",
			"Messages stored in the broker's stream (one per event and routed subscription).",
			nil, labels),
		errorsDesc: prometheus.NewDesc("sluice_jetstream_publish_errors_total",
			"Failed Publish calls by reason (full: limit reached; too_large: an event over the message size; unavailable: backend failure).",
			[]string{"reason"}, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagDesc
	ch <- c.publishedDesc
	ch <- c.errorsDesc
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	seen := make(map[string]bool)
	for _, cons := range c.ch.openConsumers() {
		if seen[cons.name] {
			continue
		}
		seen[cons.name] = true
		ch <- prometheus.MustNewConstMetric(c.lagDesc, prometheus.GaugeValue, float64(cons.Len()), cons.name)
	}
	ch <- prometheus.MustNewConstMetric(c.publishedDesc, prometheus.CounterValue, float64(c.published.Load()))
	ch <- prometheus.MustNewConstMetric(c.errorsDesc, prometheus.CounterValue, float64(c.errFull.Load()), "full")
	ch <- prometheus.MustNewConstMetric(c.errorsDesc, prometheus.CounterValue, float64(c.errUnavailable.Load()), "unavailable")
	ch <- prometheus.MustNewConstMetric(c.errorsDesc, prometheus.CounterValue, float64(c.errTooLarge.Load()), "too_large")
}
