package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
)

// The overload judge: on one broker, reference phases at the sustained rate alternate
// with overload phases (R O R O R O), and the verdict is the median of the pairwise
// ratios delivery(O) / delivery(R). A ratio of two samples taken minutes apart on a
// shared machine moves with the machine; a pair taken back to back on the same broker
// moves much less, and the median of several pairs less still. A broker whose delivery
// collapses whenever it refuses still fails: the reference phases are not overloaded.

// runPairs runs p.Pairs pairs at t's broker: a reference phase sending sustained
// events/s over capacityConns connections for p.Reference (measureCapacity, judged on
// the delivery rate of its last seconds), then an overload phase sending factor ×
// sustained over conns for p.Overload (runOverload, with its probes). It returns the
// overload phases merged (mergeOverloads) with Pairs and Goodput set, and the bench
// result of the last overload phase for the report. report, if not nil, is called after
// each pair.
func runPairs(ctx context.Context, t target, sustained, factor float64, conns int, p plan, settle time.Duration,
	report func(int, overloadPair)) (*overloadResult, *bench.Result, error) {
	var phases []*overloadResult
	var pairs []overloadPair
	var last *bench.Result
	for i := range max(p.Pairs, 1) {
		ref := measureCapacity(ctx, t, sustained, p.Reference, settle)
		o, res, err := runOverload(ctx, t, sustained, factor, conns, p.Overload, settle)
		if err != nil {
			return nil, nil, fmt.Errorf("pair %d of %d: %w", i+1, p.Pairs, err)
		}
		pair := overloadPair{Reference: ref, Delivery: o.DeliveryRate}
		if ref.Error == "" && ref.Delivery > 0 {
			pair.Ratio = o.DeliveryRate / ref.Delivery
		}
		pairs, phases, last = append(pairs, pair), append(phases, o), res
		if report != nil {
			report(i, pair)
		}
	}
	o := mergeOverloads(phases)
	o.Pairs, o.Goodput = pairs, medianRatio(pairs)
	return o, last, nil
}

// medianRatio is the median of the pairs' ratios; a pair whose reference failed counts
// as 0, so that failures cannot raise the verdict.
func medianRatio(pairs []overloadPair) float64 {
	if len(pairs) == 0 {
		return 0
	}
	r := make([]float64, len(pairs))
	for i, p := range pairs {
		r[i] = p.Ratio
	}
	slices.Sort(r)
	if n := len(r); n%2 == 0 {
		return (r[n/2-1] + r[n/2]) / 2
	}
	return r[len(r)/2]
}

// mergeOverloads folds the overload phases of one run into one result: counts summed,
// the worst of latencies, health answers and rates (the lowest achieved rate, the
// lowest second), the median phase's delivery rate, and the last phase's per-second
// series, latency histograms, RSS high-water mark (the broker's whole life) and state.
func mergeOverloads(phases []*overloadResult) *overloadResult {
	if len(phases) == 0 {
		return &overloadResult{}
	}
	m := *phases[len(phases)-1]
	m.Requests, m.Accepted, m.Rejected429, m.Rejected503, m.OtherFailures, m.Lost = 0, 0, 0, 0, 0, 0
	m.HealthFailures, m.HealthAnswers, m.HealthOver100, m.HealthMaxMS = 0, 0, 0, 0
	m.ProbeRequests, m.Probe429, m.Probe429RetryAfter, m.CPUSeconds = 0, 0, 0, 0
	m.Settled = true
	rates := make([]float64, 0, len(phases))
	for _, o := range phases {
		m.Requests += o.Requests
		m.Accepted += o.Accepted
		m.Rejected429 += o.Rejected429
		m.Rejected503 += o.Rejected503
		m.OtherFailures += o.OtherFailures
		m.Lost += o.Lost
		m.Settled = m.Settled && o.Settled
		m.Achieved = min(m.Achieved, o.Achieved)
		m.MinDeliveryRate = min(m.MinDeliveryRate, o.MinDeliveryRate)
		rates = append(rates, o.DeliveryRate)
		m.HealthFailures += o.HealthFailures
		m.HealthAnswers += o.HealthAnswers
		m.HealthOver100 += o.HealthOver100
		if o.HealthMaxMS > m.HealthMaxMS {
			m.HealthMaxMS, m.HealthSlowestPath, m.HealthSlowestAtS = o.HealthMaxMS, o.HealthSlowestPath, o.HealthSlowestAtS
		}
		m.ProbeRequests += o.ProbeRequests
		m.Probe429 += o.Probe429
		m.Probe429RetryAfter += o.Probe429RetryAfter
		m.ProbeRejectP99MS = max(m.ProbeRejectP99MS, o.ProbeRejectP99MS)
		m.ProbeRejectMaxMS = max(m.ProbeRejectMaxMS, o.ProbeRejectMaxMS)
		m.ProbeAcceptedP99MS = max(m.ProbeAcceptedP99MS, o.ProbeAcceptedP99MS)
		m.CPUSeconds += o.CPUSeconds
	}
	slices.Sort(rates)
	m.DeliveryRate = rates[len(rates)/2]
	return &m
}
