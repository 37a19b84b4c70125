package ui

import (
	"time"

	"github.com/sluice-broker/sluice/delivery"
)

// Snapshot is what GET /ui/snapshot.json returns, once per sampling interval: the page at
// /ui and `sluice top` both draw it. Totals are the Prometheus counters of /metrics as
// sampled; rates and percentiles are computed from successive samples.
type Snapshot struct {
	Time            time.Time             `json:"time"`
	IntervalSeconds float64               `json:"interval_s"`       // between samples
	RateSeconds     float64               `json:"rate_s"`           // span of the rates
	LatencySeconds  float64               `json:"latency_window_s"` // span of P50 and P99
	WindowSeconds   float64               `json:"window_s"`         // span of the histories
	Brokers         []Broker              `json:"brokers"`          // sorted by name
	Triggers        []Trigger             `json:"triggers"`         // sorted by name
	DeadLetters     []delivery.DeadLetter `json:"dead_letters"`     // the last ones, newest first
	DeadLettersSeen uint64                `json:"dead_letters_seen"`
}

// Broker is one broker's (or channel's) ingress.
type Broker struct {
	Name string `json:"name"`
	// Ready is false while the broker's channel cannot store events (its backend is
	// unreachable: ingress answers 503), and NotReadyReason says why.
	Ready          bool   `json:"ready"`
	NotReadyReason string `json:"not_ready_reason,omitempty"`
	// AcceptedTotal is sluice_events_accepted_total; RejectedTotal the sum of
	// sluice_requests_rejected_total over its reasons.
	AcceptedTotal float64 `json:"accepted_total"`
	RejectedTotal float64 `json:"rejected_total"`
	// IngressRate and RejectedRate are per second over the last RateSeconds.
	IngressRate  float64 `json:"ingress_rate"`
	RejectedRate float64 `json:"rejected_rate"`
	History      struct {
		T        []int64   `json:"t"` // Unix milliseconds of each point
		Ingress  []float64 `json:"ingress"`
		Rejected []float64 `json:"rejected"`
	} `json:"history"`
}

// Trigger is one trigger's (or subscription's) delivery.
type Trigger struct {
	Name   string `json:"name"`
	Broker string `json:"broker"` // "" when its queue depth is not reported
	// Totals of the sluice_delivery_* counters. FailedTotal counts the attempts toward
	// the subscriber that did not get a 2xx (retried or not).
	DeliveredTotal     float64 `json:"delivered_total"`
	FailedTotal        float64 `json:"failed_total"`
	RetriesTotal       float64 `json:"retries_total"`
	DeadLetteredTotal  float64 `json:"dead_lettered_total"`
	UndeliverableTotal float64 `json:"undeliverable_total"`
	// DLQStoredTotal is sluice_dlq_stored_total: events kept in its dead-letter store
	// (no deadLetterSink). The page lists the store itself (GET /triggers/NS/NAME/dlq).
	DLQStoredTotal float64 `json:"dlq_stored_total"`
	// DeliveryRate and FailureRate are per second over the last RateSeconds.
	DeliveryRate float64 `json:"delivery_rate"`
	FailureRate  float64 `json:"failure_rate"`
	// QueueDepth is sluice_queue_depth (consumer lag on durable channels).
	QueueDepth float64 `json:"queue_depth"`
	// InFlight and InFlightLimit are the attempts in flight and the limit the adaptive
	// controller chose (sluice_delivery_inflight, sluice_delivery_inflight_limit).
	InFlight      float64 `json:"inflight"`
	InFlightLimit float64 `json:"inflight_limit"`
	// P50 and P99 are the delivery latency quantiles in milliseconds over the last
	// LatencySeconds (from sluice_delivery_latency_seconds); nil with no delivery then.
	P50     *float64 `json:"p50_ms"`
	P99     *float64 `json:"p99_ms"`
	History struct {
		T         []int64    `json:"t"`
		Delivered []float64  `json:"delivered"` // per second
		Failed    []float64  `json:"failed"`    // per second
		Depth     []float64  `json:"depth"`
		Limit     []float64  `json:"limit"`
		P50       []*float64 `json:"p50_ms"` // over the last 10 s
		P99       []*float64 `json:"p99_ms"`
	} `json:"history"`
}
