package delivery

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the delivery metrics of every dispatcher of a process, each series
// labelled trigger="namespace/name". Create one with NewMetrics and share it through
// WithMetrics. It is safe for concurrent use.
//
// Series (all prefixed sluice_delivery_):
//
//	attempts_total{trigger,dest,result}   HTTP attempts; dest = subscriber|reply|deadletter,
//	                                      result = 2xx|3xx|4xx|5xx|timeout|error
//	retries_total{trigger}                attempts that were retries
//	delivered_total{trigger}              events the subscriber accepted (2xx)
//	dead_lettered_total{trigger}          events the dead-letter sink accepted
//	undeliverable_total{trigger,reason}   events that could go nowhere, logged with their
//	                                      id: reason = no_sink|sink_failed
//	replies_total{trigger,outcome}        replies: ingested|posted|not_event|invalid|
//	                                      no_replier|failed (Replier error; the delivery
//	                                      is retried)
//	loop_stopped_total{trigger}           replies not re-ingested because the TTL ran out
//	released_total{trigger,redelivered}   messages released unsettled at shutdown;
//	                                      redelivered=false means lost (memory channel)
//	inflight_limit{trigger}               current (adaptive) limit of attempts in flight
//	inflight{trigger}                     attempts in flight toward the subscriber now
//	latency_seconds{trigger}              from receipt by the dispatcher to the 2xx of the
//	                                      subscriber, retries included
type Metrics struct {
	attempts      *prometheus.CounterVec
	retries       *prometheus.CounterVec
	delivered     *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
	undeliverable *prometheus.CounterVec
	replies       *prometheus.CounterVec
	loopStopped   *prometheus.CounterVec
	released      *prometheus.CounterVec
	limit         *prometheus.GaugeVec
	inflight      *prometheus.GaugeVec
	latency       *prometheus.HistogramVec
}

// NewMetrics creates the delivery metrics and registers them with reg; a nil reg leaves
// them unregistered (tests, or a caller that only reads them back). It panics if reg
// already holds metrics of the same names, like prometheus.MustRegister.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "sluice", "delivery"
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help},
			append([]string{"trigger"}, labels...))
	}
	m := &Metrics{
		attempts:      counter("attempts_total", "HTTP delivery attempts by destination and result.", "dest", "result"),
		retries:       counter("retries_total", "Delivery attempts that were retries."),
		delivered:     counter("delivered_total", "Events accepted (2xx) by the subscriber."),
		deadLettered:  counter("dead_lettered_total", "Events accepted by the dead-letter sink."),
		undeliverable: counter("undeliverable_total", "Events that could be delivered nowhere (logged with their id).", "reason"),
		replies:       counter("replies_total", "Subscriber replies by outcome.", "outcome"),
		loopStopped:   counter("loop_stopped_total", "Replies not re-ingested because knativebrokerttl ran out."),
		released:      counter("released_total", "Messages released unsettled at shutdown.", "redelivered"),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "inflight_limit",
			Help: "Current limit of attempts in flight toward the subscriber."}, []string{"trigger"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "inflight",
			Help: "Attempts in flight toward the subscriber."}, []string{"trigger"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "latency_seconds",
			Help:    "Time from receipt by the dispatcher to acceptance by the subscriber, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"trigger"}),
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.retries, m.delivered, m.deadLettered, m.undeliverable,
			m.replies, m.loopStopped, m.released, m.limit, m.inflight, m.latency)
	}
	return m
}

// Forget deletes every series of trigger, for a trigger that was removed.
func (m *Metrics) Forget(trigger string) {
	l := prometheus.Labels{"trigger": trigger}
	m.attempts.DeletePartialMatch(l)
	m.retries.DeletePartialMatch(l)
	m.delivered.DeletePartialMatch(l)
	m.deadLettered.DeletePartialMatch(l)
	m.undeliverable.DeletePartialMatch(l)
	m.replies.DeletePartialMatch(l)
	m.loopStopped.DeletePartialMatch(l)
	m.released.DeletePartialMatch(l)
	m.limit.DeletePartialMatch(l)
	m.inflight.DeletePartialMatch(l)
	m.latency.DeletePartialMatch(l)
}

// Destinations of an attempt, the dest label.
const (
	destSubscriber = iota
	destReply
	destDeadLetter
	numDests
)

var destNames = [numDests]string{"subscriber", "reply", "deadletter"}

// Results of an attempt, the result label.
const (
	result2xx = iota
	result3xx
	result4xx
	result5xx
	resultTimeout
	resultError
	numResults
)

var resultNames = [numResults]string{"2xx", "3xx", "4xx", "5xx", "timeout", "error"}

// Outcomes of a reply, the outcome label.
const (
	replyIngested = iota
	replyPosted
	replyNotEvent
	replyInvalid
	replyNoReplier
	replyFailed
	numReplyOutcomes
)

var replyNames = [numReplyOutcomes]string{"ingested", "posted", "not_event", "invalid", "no_replier", "failed"}

// triggerMetrics is one trigger's series, resolved once so the hot path does no label
// lookups.
type triggerMetrics struct {
	attempts                   [numDests][numResults]prometheus.Counter
	retries                    prometheus.Counter
	delivered, deadLettered    prometheus.Counter
	noSink, sinkFailed         prometheus.Counter
	replies                    [numReplyOutcomes]prometheus.Counter
	loopStopped                prometheus.Counter
	releasedKept, releasedLost prometheus.Counter
	limit, inflight            prometheus.Gauge
	latency                    prometheus.Observer
}

func (m *Metrics) forTrigger(name string) *triggerMetrics {
	t := &triggerMetrics{
		retries:      m.retries.WithLabelValues(name),
		delivered:    m.delivered.WithLabelValues(name),
		deadLettered: m.deadLettered.WithLabelValues(name),
		noSink:       m.undeliverable.WithLabelValues(name, "no_sink"),
		sinkFailed:   m.undeliverable.WithLabelValues(name, "sink_failed"),
		loopStopped:  m.loopStopped.WithLabelValues(name),
		releasedKept: m.released.WithLabelValues(name, "true"),
		releasedLost: m.released.WithLabelValues(name, "false"),
		limit:        m.limit.WithLabelValues(name),
		inflight:     m.inflight.WithLabelValues(name),
		latency:      m.latency.WithLabelValues(name),
	}
	for d := range numDests {
		for r := range numResults {
			t.attempts[d][r] = m.attempts.WithLabelValues(name, destNames[d], resultNames[r])
		}
	}
	for o := range numReplyOutcomes {
		t.replies[o] = m.replies.WithLabelValues(name, replyNames[o])
	}
	return t
}

// resultOf classifies an attempt for the result label.
func resultOf(status int, timedOut bool) int {
	switch {
	case timedOut:
		return resultTimeout
	case status == 0:
		return resultError
	case status < 300:
		return result2xx
	case status < 400:
		return result3xx
	case status < 500:
		return result4xx
	}
	return result5xx
}
