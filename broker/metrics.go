package broker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the ingress's Prometheus metrics. Queue depth is read at scrape time by the
// Server's collector.
type Metrics struct {
	received  *prometheus.CounterVec
	accepted  *prometheus.CounterVec
	rejected  *prometheus.CounterVec
	unmatched *prometheus.CounterVec
	dedup     *prometheus.CounterVec
	evicted   *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

// NewMetrics creates the ingress metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "events_received_total",
			Help: "Events received by ingress, per broker, before validation.",
		}, []string{"broker"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "events_accepted_total",
			Help: "Events answered 202 (stored in the broker's channel), per broker.",
		}, []string{"broker"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "requests_rejected_total",
			Help: "Ingress requests rejected, per broker and reason (invalid, too_large, unsupported_media_type, method, unknown_broker, full, unavailable, shutting_down, ttl, unauthenticated, forbidden, rate).",
		}, []string{"broker", "reason"}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "events_unmatched_total",
			Help: "Accepted events that matched no trigger, per broker.",
		}, []string{"broker"}),
		dedup: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "events_deduplicated_total",
			Help: "Events answered 202 and not stored: their (source, id) was accepted within the broker's sluice.dev/dedup-window, per broker.",
		}, []string{"broker"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Name: "dedup_evicted_total",
			Help: "(source, id) pairs a broker's dedup window forgot before their window ended because it remembered --dedup-max-entries, per broker.",
		}, []string{"broker"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Name: "ingress_duration_seconds",
			Help:    "Time to parse, route and store a request's events, per broker.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"broker"}),
	}
	reg.MustRegister(m.received, m.accepted, m.rejected, m.unmatched, m.dedup, m.evicted, m.latency)
	return m
}

// brokerMetrics are one broker's children of the hot-path metrics, looked up once.
type brokerMetrics struct {
	received, accepted, unmatched, full prometheus.Counter
	deduplicated, evicted               prometheus.Counter
	latency                             prometheus.Observer
}

func (m *Metrics) forBroker(key string) brokerMetrics {
	return brokerMetrics{
		received:     m.received.WithLabelValues(key),
		accepted:     m.accepted.WithLabelValues(key),
		unmatched:    m.unmatched.WithLabelValues(key),
		full:         m.rejected.WithLabelValues(key, "full"),
		deduplicated: m.dedup.WithLabelValues(key),
		evicted:      m.evicted.WithLabelValues(key),
		latency:      m.latency.WithLabelValues(key),
	}
}

// queueCollector reports, at scrape time, each trigger's queue depth and each broker's
// admission state: the requests waiting for room and those let in and not yet stored
// (what overload.Options.MaxStoring, --max-storing, bounds). The memory channels' byte budget is reported by
// channel/registry, which owns it.
type queueCollector struct {
	s                       *Server
	depth, waiting, storing *prometheus.Desc
	dedup                   *prometheus.Desc
}

func newQueueCollector(s *Server) *queueCollector {
	return &queueCollector{
		s: s,
		depth: prometheus.NewDesc("sluice_queue_depth", "Events waiting for delivery, per trigger (consumer lag on durable channels).",
			[]string{"broker", "trigger"}, nil),
		waiting: prometheus.NewDesc("sluice_ingress_waiting_requests", "Ingress requests waiting for room before their bodies are read (the admission queue), per broker.",
			[]string{"broker"}, nil),
		storing: prometheus.NewDesc("sluice_ingress_storing_requests", "Ingress requests let in and not yet stored in the channel, per broker: what --max-storing bounds.",
			[]string{"broker"}, nil),
		dedup: prometheus.NewDesc("sluice_dedup_entries", "(source, id) pairs a broker's dedup window remembers now, per broker with sluice.dev/dedup-window: at most --dedup-max-entries.",
			[]string{"broker"}, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.waiting
	ch <- c.storing
	ch <- c.dedup
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.s.snapshot() {
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(b.gate.Waiting()), b.key)
		ch <- prometheus.MustNewConstMetric(c.storing, prometheus.GaugeValue, float64(b.gate.Storing()), b.key)
		if w := b.dedup.Load(); w != nil {
			ch <- prometheus.MustNewConstMetric(c.dedup, prometheus.GaugeValue, float64(w.len()), b.key)
		}
		for _, t := range b.triggerList() {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(t.consumer.Len()), b.key, t.key)
		}
	}
}
