package main

import (
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
)

// results is everything one suite run measured; it is written as results.json and
// rendered into the README.
type results struct {
	Machine   machine           `json:"machine"`
	Command   string            `json:"command"`
	Quick     bool              `json:"quick"`
	Commit    string            `json:"commit"`
	Started   time.Time         `json:"started"`
	Finished  time.Time         `json:"finished"`
	Criteria  criteria          `json:"criteria"`
	Plan      plan              `json:"plan"`
	Scenarios []scenarioResult  `json:"scenarios"`
	Overloads []*overloadResult `json:"overloads,omitempty"`
	Floor     *floorResult      `json:"floor,omitempty"`
	Batch     *batchResult      `json:"batch,omitempty"`
	Pinned    bool              `json:"pinned"` // brokers on CPU 1, generator and receivers on CPU 0
	Verdicts  []verdict         `json:"verdicts"`
	LoadAvg   map[string]string `json:"load_average"` // "start", "end": /proc/loadavg
	Notes     []string          `json:"notes,omitempty"`
}

// plan holds the timings of a run (full or --quick).
type plan struct {
	Step       time.Duration `json:"step_ns"`
	StepWarmup time.Duration `json:"step_warmup_ns"`
	Settle     time.Duration `json:"settle_ns"`
	Half       time.Duration `json:"half_ns"`
	Overload   time.Duration `json:"overload_ns"`  // one overload phase
	Reference  time.Duration `json:"reference_ns"` // one reference phase
	Pairs      int           `json:"pairs"`        // reference and overload phases, alternated
	Capacity   time.Duration `json:"capacity_ns"`  // the overload runs' capacity step
	// Precision and MaxSteps are the sustained-rate search's (searchPlan): stop when
	// the lowest failing rate is within Precision (a fraction) of the highest passing
	// one, or after MaxSteps steps.
	Precision float64 `json:"search_precision"`
	MaxSteps  int     `json:"search_max_steps"`
}

// scenarioResult is one ramped scenario.
type scenarioResult struct {
	scenario
	NotRun    string       `json:"not_run,omitempty"` // why it did not run
	Error     string       `json:"error,omitempty"`   // what went wrong while it ran
	Steps     []stepResult `json:"steps"`
	Sustained int          `json:"sustained_step"` // index into Steps, -1 = none
	// FindMax is the search that ran Steps: why it stopped, whether it converged.
	FindMax   *bench.MaxSearch `json:"find_max,omitempty"`
	Half      *stepResult      `json:"half,omitempty"` // the latency run at 50% of sustained
	PeakRSS   int64            `json:"broker_peak_rss_bytes"`
	ReportDir string           `json:"report_dir,omitempty"` // relative to the README
	RampPlots []string         `json:"ramp_plots,omitempty"`
}

// sustainedStep returns the sustained step, or nil.
func (s *scenarioResult) sustainedStep() *stepResult {
	if s == nil || s.Sustained < 0 || s.Sustained >= len(s.Steps) {
		return nil
	}
	return &s.Steps[s.Sustained]
}

// SustainedRate is the sustained events/s (0 if none).
func (s *scenarioResult) SustainedRate() float64 {
	if st := s.sustainedStep(); st != nil {
		return st.IntendedRate
	}
	return 0
}

// find returns the named scenario's result, or nil.
func (r *results) find(name string) *scenarioResult {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name == name {
			return &r.Scenarios[i]
		}
	}
	return nil
}

// overloadResult is one overload run: Factor × a channel's sustained rate.
type overloadResult struct {
	Channel     string  `json:"channel"`     // memory, jetstream, kafka
	Factor      float64 `json:"factor"`      // 2 or 4
	Connections int     `json:"connections"` // the generator's
	NotRun      string  `json:"not_run,omitempty"`
	Error       string  `json:"error,omitempty"`
	// SustainedRate is what the run is a multiple of and is judged against: the larger
	// of RampSustainedRate, the channel scenario's ramp, and Capacity.Delivery, the
	// delivery rate measured at this run's broker just before it; SustainedFrom says
	// which ("ramp" or "capacity").
	SustainedRate     float64         `json:"sustained_rate"`
	SustainedFrom     string          `json:"sustained_from"`
	RampSustainedRate float64         `json:"ramp_sustained_rate"`
	Capacity          *capacityResult `json:"capacity,omitempty"`
	Rate              float64         `json:"rate"` // intended, Factor × sustained
	Achieved          float64         `json:"achieved_rate"`
	DurationS         float64         `json:"duration_s"`
	Requests          uint64          `json:"requests"`
	Accepted          uint64          `json:"accepted"`
	Rejected429       uint64          `json:"rejected_429"`
	Rejected503       uint64          `json:"rejected_503"`
	OtherFailures     uint64          `json:"other_failures"`
	Lost              uint64          `json:"lost"`
	Settled           bool            `json:"settled"`
	// DeliveryRate is the mean events/s received over seconds [DeliveryFromS,
	// DeliveryToS) of the load: all of it (loadSeconds) but its first seconds, the
	// queue filling.
	DeliveryRate float64 `json:"delivery_rate"`
	// MinDeliveryRate is the lowest events/s received in one second of the same span.
	MinDeliveryRate float64 `json:"min_delivery_rate"`
	DeliveryFromS   int     `json:"delivery_from_s"`
	DeliveryToS     int     `json:"delivery_to_s"`
	// DeliveryPerSecond is events received per second from the load's start.
	DeliveryPerSecond []uint64 `json:"delivery_per_second"`
	// HealthMaxMS is the slowest answer to GET /healthz, /readyz or /metrics from the
	// overload's start until its accepted events have arrived (one of each every 200 ms);
	// HealthFailures counts non-200 answers.
	HealthMaxMS    float64 `json:"health_max_ms"`
	HealthFailures int     `json:"health_failures"`
	// HealthSlowestPath is the path of the slowest answer, HealthSlowestAtS when it was
	// asked (seconds since the overload began); HealthOver100 counts the answers of
	// HealthAnswers that took 100 ms or more. They tell a start-up stall from a steady one.
	HealthSlowestPath string  `json:"health_slowest_path,omitempty"`
	HealthSlowestAtS  float64 `json:"health_slowest_at_s,omitempty"`
	HealthAnswers     int     `json:"health_answers,omitempty"`
	HealthOver100     int     `json:"health_over_100ms,omitempty"`
	Publish           latency `json:"publish"`
	E2E               latency `json:"e2e"`
	// Probe: a separate client's requests during the overload, timed from the actual
	// send, split by answer.
	ProbeRequests      int     `json:"probe_requests"`
	Probe429           int     `json:"probe_429"`
	Probe429RetryAfter int     `json:"probe_429_with_retry_after"`
	ProbeRejectP99MS   float64 `json:"probe_reject_p99_ms"`
	ProbeRejectMaxMS   float64 `json:"probe_reject_max_ms"`
	ProbeAcceptedP99MS float64 `json:"probe_accepted_p99_ms"`
	PeakRSS            int64   `json:"broker_peak_rss_bytes"`
	CPUSeconds         float64 `json:"broker_cpu_s"`
	Alive              bool    `json:"broker_alive"`
	ReportDir          string  `json:"report_dir,omitempty"`
	// Pairs are the run's phases on its one broker, alternated R O R O …: a reference
	// phase at SustainedRate, then an overload phase at Rate. The fields above sum (or,
	// for latencies, rates and the slowest answers, take the worst of) every overload
	// phase; the per-second series and report are the last one's.
	Pairs []overloadPair `json:"pairs,omitempty"`
	// Goodput is the median over Pairs of each overload phase's delivery rate divided by
	// the reference phase's before it: what the delivery verdict judges.
	Goodput float64 `json:"goodput"`
}

// overloadPair is one reference phase and the overload phase after it.
type overloadPair struct {
	Reference *capacityResult `json:"reference"` // at the sustained rate, 256 connections
	Delivery  float64         `json:"overload_delivery_rate"`
	Ratio     float64         `json:"ratio"` // Delivery / Reference.Delivery (0 if the reference failed)
}
