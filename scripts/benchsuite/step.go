package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// latency is a latency distribution in milliseconds.
type latency struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p99_9_ms"`
	Max  float64 `json:"max_ms"`
}

func toLatency(s stats.Summary) latency {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return latency{P50: ms(s.P50), P99: ms(s.P99), P999: ms(s.P999), Max: ms(s.Max)}
}

// stepResult is one constant-rate run against a target. Rates count events sent
// (requests); deliveries count events received, summed over the matching triggers'
// receivers.
type stepResult struct {
	IntendedRate float64 `json:"intended_rate"` // events/s the schedule asked for
	Rate         float64 `json:"rate"`          // events/s dispatched
	DurationS    float64 `json:"duration_s"`    // measured part, without warm-up
	WarmupS      float64 `json:"warmup_s"`
	Requests     uint64  `json:"requests"`   // measured requests
	Success      float64 `json:"success"`    // share answered 2xx (0…1)
	Accepted     uint64  `json:"accepted"`   // 2xx, warm-up included
	Deliveries   uint64  `json:"deliveries"` // distinct (receiver, event) pairs, warm-up included
	Lost         uint64  `json:"lost"`       // accepted but missing at some receiver after settling
	Duplicates   uint64  `json:"duplicates"`
	Saturated    bool    `json:"generator_saturated"`
	Publish      latency `json:"publish"` // intended send → broker's answer
	E2E          latency `json:"e2e"`     // intended send → receipt, all receivers merged
	// CPUSeconds is the broker's CPU time over the step (warm-up and settling
	// included); 0 for the direct scenario.
	CPUSeconds float64 `json:"broker_cpu_s"`
	// CPUPerEventUS is CPUSeconds per accepted event, in microseconds.
	CPUPerEventUS float64 `json:"broker_cpu_us_per_event"`
	// DeliveriesPerCPUSecond is Deliveries / CPUSeconds: deliveries/s per core spent.
	DeliveriesPerCPUSecond float64 `json:"deliveries_per_cpu_s"`
	Pass                   bool    `json:"pass"`
	Why                    string  `json:"why,omitempty"` // why the step did not pass
}

// target is where a scenario's load goes and who receives it.
type target struct {
	URL       string      // broker ingest URL ("" = direct to the receiver)
	Receivers []string    // listen addresses; Receivers[i] serves matching trigger i
	Broker    *brokerProc // nil for direct
	Data      []byte
}

// stepSpec is one constant-rate run's schedule.
type stepSpec struct {
	Rate     float64
	Duration time.Duration
	Warmup   time.Duration
	Settle   time.Duration
	// Connections is the generator's connection count; 0 means 256.
	Connections int
}

// runStep runs one constant-rate bench through t and measures it. It returns the bench
// result of the first receiver too, for a report directory.
func runStep(ctx context.Context, t target, sp stepSpec) (stepResult, *bench.Result, error) {
	run := newRunID()
	tmpl, err := cevent.NewTemplate(cevent.Binary, cevent.DefaultType, cevent.DefaultSource, run, t.Data, 1)
	if err != nil {
		return stepResult{}, nil, fmt.Errorf("event template: %w", err)
	}
	lo := load.Options{Target: t.URL, Pacer: pacer.Constant{Rate: sp.Rate, Duration: sp.Duration},
		Template: tmpl, Connections: cmp.Or(sp.Connections, 256), Timeout: 10 * time.Second, TrackAccepted: true}
	if sp.Warmup > 0 {
		w := pacer.Warmup{Rate: sp.Rate, Duration: sp.Warmup, Next: lo.Pacer}
		lo.Pacer, lo.WarmupHits, lo.Warmup = w, w.Hits(), sp.Warmup
	}
	extras, err := startReceivers(t.Receivers[1:])
	if err != nil {
		return stepResult{}, nil, err
	}
	defer extras.stop()
	var cpu0 time.Duration
	if t.Broker != nil {
		if cpu0, err = t.Broker.CPU(); err != nil {
			return stepResult{}, nil, err
		}
	}
	res, err := bench.Run(ctx, bench.Options{Load: lo, ReceiverAddr: t.Receivers[0], Direct: t.URL == "", Settle: sp.Settle})
	if err != nil {
		return stepResult{}, nil, err
	}
	lost, deliveries, dups, hist := res.Lost, res.Receive.Events, res.Receive.Duplicates, res.Receive.Hist
	if len(extras) > 0 {
		extras.settle(ctx, res.Load.Accepted, run, sp.Settle)
		for _, r := range extras {
			lost += res.Load.Accepted.Missing(r.rcv.Seen(run), nil)
			rep := r.rcv.Report()
			deliveries += rep.Events
			dups += rep.Duplicates
			hist.Merge(rep.Hist)
		}
	}
	l := res.Load
	s := stepResult{
		IntendedRate: sp.Rate, Rate: l.Rate, DurationS: sp.Duration.Seconds(), WarmupS: sp.Warmup.Seconds(), Requests: l.Requests,
		Success: l.Success, Accepted: res.Accepted, Deliveries: deliveries, Lost: lost, Duplicates: dups,
		Saturated: l.Saturated, Publish: toLatency(l.Latency), E2E: toLatency(stats.Summarize(hist)),
	}
	if t.Broker != nil {
		cpu1, err := t.Broker.CPU()
		if err != nil {
			return s, res, fmt.Errorf("broker died during the step? %w", err)
		}
		s.CPUSeconds = (cpu1 - cpu0).Seconds()
		if s.Accepted > 0 {
			s.CPUPerEventUS = 1e6 * s.CPUSeconds / float64(s.Accepted)
		}
		if s.CPUSeconds > 0 {
			s.DeliveriesPerCPUSecond = float64(s.Deliveries) / s.CPUSeconds
		}
	}
	return s, res, nil
}

// extraReceiver is an in-process receiver for a fan-out trigger beyond the first.
type extraReceiver struct {
	rcv  *receive.Receiver
	stop func()
}

type extraReceivers []extraReceiver

// startReceivers starts one receiver per address.
func startReceivers(addrs []string) (extraReceivers, error) {
	var rs extraReceivers
	for _, a := range addrs {
		ln, err := receive.Listen(a)
		if err != nil {
			rs.stop()
			return nil, err
		}
		r := receive.New(receive.Options{})
		srv, err := receive.NewServer(ln, r)
		if err != nil {
			rs.stop()
			return nil, err
		}
		go func() { _ = srv.Serve() }()
		rs = append(rs, extraReceiver{rcv: r, stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}})
	}
	return rs, nil
}

func (rs extraReceivers) stop() {
	for _, r := range rs {
		r.stop()
	}
}

// settle waits until every receiver has every accepted event, or until d passes.
func (rs extraReceivers) settle(ctx context.Context, accepted *stats.Bitset, run string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		missing := uint64(0)
		for _, r := range rs {
			missing += accepted.Missing(r.rcv.Seen(run), nil)
		}
		if missing == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newRunID returns 12 random hex digits.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
