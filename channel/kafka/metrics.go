package kafka

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the channel's Prometheus collector: consumer lag per open subscription and
// counters of published records and publish errors, all labelled with the topic so that
// the channels of several brokers can share one registerer.
type metrics struct {
	c             *Channel
	lag           *prometheus.Desc
	published     prometheus.Counter
	publishErrors prometheus.Counter
}

func newMetrics(c *Channel) *metrics {
	labels := prometheus.Labels{"topic": c.topic}
	return &metrics{
		c: c,
		lag: prometheus.NewDesc("sluice_kafka_consumer_lag",
			"Records of the topic past the subscription's settled offsets, whatever subscriptions they are routed to (the consumer group's lag, as Kafka tools show it).",
			[]string{"subscription"}, labels),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_kafka_published_records_total", ConstLabels: labels,
			Help: "Records acknowledged by the Kafka cluster.",
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_kafka_publish_errors_total", ConstLabels: labels,
			Help: "Records whose Publish call failed.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.lag
	m.published.Describe(ch)
	m.publishErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, k := range m.c.openConsumers() {
		ch <- prometheus.MustNewConstMetric(m.lag, prometheus.GaugeValue, float64(k.lag.Load()), k.name)
	}
	m.published.Collect(ch)
	m.publishErrors.Collect(ch)
}
