package main

import (
	"context"
	"math"
	"time"
)

// The capacity step: what an overload run's "sustained rate" is measured against.
//
// The channel scenarios' ramps judge a step on latency too (p99 ≤ 250 ms), and a durable
// channel's first minutes on a busy machine (JetStream's file store, Kafka's producer
// batches and consumer group settling) bring latency spikes that end its ramp far below
// what it delivers a few minutes later: a 2× "overload" of that rate then refuses nothing
// and proves nothing (docs/decisions/0017-bench-reference-rate.md). So each overload run, at its fresh broker (with
// --max-backlog set) and after its priming run, first sends Plan.Capacity's worth of
// events at a constant rate well above what the channel can take, and records the
// delivery rate the receiver saw over the last seconds of that load (which lasts longer
// than Plan.Capacity when the broker pushes back): the rate the channel delivers while
// it is saturated, on this broker, now. The run is then factor × max(ramp, capacity) and is
// judged against the same figure. The ramp's figure, measured without refusals, stays a
// floor: the capacity is itself measured under saturation, so alone it could not reveal
// a delivery collapse that happens whenever the broker refuses.

// capacityConns is the capacity step's connection count (the 2× run's).
const capacityConns = 256

// capacityResult is an overload run's capacity step.
type capacityResult struct {
	Rate      float64 `json:"rate"` // intended events/s
	Achieved  float64 `json:"achieved_rate"`
	DurationS float64 `json:"duration_s"`
	Accepted  uint64  `json:"accepted"`
	Refused   uint64  `json:"refused"` // 429 and 503 answers
	Lost      uint64  `json:"lost"`
	Settled   bool    `json:"settled"`
	// Delivery is the mean events/s received over the step's last TailS seconds, up to
	// DeliveryToS: the end of its load (loadSeconds), not of its planned duration.
	Delivery          float64  `json:"delivery_rate"`
	TailS             int      `json:"tail_s"`
	DeliveryToS       int      `json:"delivery_to_s"`
	DeliveryPerSecond []uint64 `json:"delivery_per_second"`
	Error             string   `json:"error,omitempty"`
}

// capacityStepRate is the capacity step's rate for a channel whose ramp sustained ramp
// events/s, memory being the memory scenario's sustained rate (0: unknown). The memory
// channel is the cheapest, so 1.5 × the larger of the two saturates any channel; without
// the memory figure a durable channel gets 4 × its own ramp's.
func capacityStepRate(channel string, ramp, memory float64) float64 {
	mult := 1.5
	if memory <= 0 && channel != scMemory {
		mult = 4
	}
	return math.Round(mult * max(ramp, memory))
}

// capacityTail is how many of the step's last seconds its delivery rate averages.
func capacityTail(d time.Duration) int {
	return max(1, min(5, int(d/time.Second)/2))
}

// measureCapacity runs the capacity step against t for d, then waits up to settle for the
// accepted events to arrive, so the overload starts with an empty backlog.
func measureCapacity(ctx context.Context, t target, rate float64, d, settle time.Duration) *capacityResult {
	c := &capacityResult{Rate: rate, DurationS: d.Seconds(), TailS: capacityTail(d)}
	_, res, err := runStep(ctx, t, stepSpec{Rate: rate, Duration: d, Settle: settle, Connections: capacityConns})
	if err != nil {
		c.Error = err.Error()
		return c
	}
	l := res.Load
	c.Achieved, c.Accepted, c.Lost, c.Settled = l.Rate, res.Accepted, res.Lost, res.Settled
	c.Refused = l.StatusCodes["429"] + l.StatusCodes["503"]
	c.DeliveryPerSecond = deliveredPerSecond(res)
	c.DeliveryToS = loadSeconds(res, d)
	c.Delivery = meanDeliveryRate(c.DeliveryPerSecond, c.DeliveryToS-c.TailS, c.DeliveryToS)
	return c
}

// fairSustained is the rate an overload run is a multiple of and judged against: the
// larger of the ramp's sustained rate and the measured capacity, and which it was.
func fairSustained(ramp float64, c *capacityResult) (float64, string) {
	if c != nil && c.Error == "" && c.Delivery > ramp {
		return math.Round(c.Delivery), "capacity"
	}
	return ramp, "ramp"
}
