package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
)

// The batch scenario: opt-in batched delivery (a trigger annotated
// sluice.dev/delivery-batch: N, docs/delivery.md) at N = 1, 10 and 100, each at a fresh
// memory broker with one trigger, driven at one fixed rate so the rows compare, then a
// short search (loadtest/bench's, as for the scenarios' sustained rates) from that
// rate for the highest rate each N sustains. The suite's
// receiver takes application/cloudevents-batch+json and counts every event of a batch;
// delivery POSTs are counted by the broker (sluice_delivery_attempts_total toward the
// subscriber, read from /metrics before and after the run).

// batchSizes are the N of the batch scenario.
var batchSizes = []int{1, 10, 100}

// batchWait is the sluice.dev/delivery-batch-wait of the batch scenario's trigger.
const batchWait = "PT0.005S" // 5 ms (config.ParseDuration has no MS unit)

// batchDefaultRate is the fixed rate when the memory scenario has no sustained rate in
// this run (--quick: batchDefaultRateQuick).
const (
	batchDefaultRate      = 8000
	batchDefaultRateQuick = 2000
)

// batchResult is the batch scenario.
type batchResult struct {
	// Rate is the fixed rate every N is driven at (events/s); RateFrom says where it
	// came from.
	Rate     float64 `json:"rate"`
	RateFrom string  `json:"rate_from"`
	Wait     string  `json:"batch_wait"`
	// SearchPrecision and RampSteps are the short search's (searchPlan): it doubles
	// the rate from the fixed-rate run until a step fails, then bisects until the
	// failing rate is within SearchPrecision (a fraction) of the passing one, in at most
	// RampSteps steps counting the fixed-rate run.
	SearchPrecision float64    `json:"search_precision"`
	RampSteps       int        `json:"ramp_max_steps"`
	Rows            []batchRow `json:"rows"`
}

// batchRow is one N: the run at the fixed rate, then the short search above it.
type batchRow struct {
	N      int    `json:"n"`
	NotRun string `json:"not_run,omitempty"`
	Error  string `json:"error,omitempty"`
	// Step is the run at the fixed rate (judged like a ramp step).
	Step stepResult `json:"step"`
	// DeliveredRate is the mean events/s the receiver got over the run's measured seconds
	// (warm-up left out).
	DeliveredRate float64 `json:"delivered_per_s"`
	// Posts is the delivery POSTs toward the subscriber over the run (warm-up and
	// settling included), from the broker's /metrics; EventsPerPost is the run's
	// deliveries per POST and PostRate DeliveredRate / EventsPerPost.
	Posts         uint64  `json:"posts"`
	EventsPerPost float64 `json:"events_per_post"`
	PostRate      float64 `json:"posts_per_s"`
	// CPUPerDeliveredUS is the broker's CPU over the run per event delivered, µs.
	CPUPerDeliveredUS float64 `json:"broker_cpu_us_per_delivered_event"`
	// Ramp is every step, the fixed-rate run first; Sustained the highest rate of a
	// passing step with every step at or below it passing (0: none).
	// SustainedAtLeast is set when no step failed: the search ended at its step limit, so
	// Sustained is a lower bound.
	Ramp             []stepResult     `json:"ramp"`
	FindMax          *bench.MaxSearch `json:"find_max,omitempty"`
	Sustained        float64          `json:"sustained_rate"`
	SustainedAtLeast bool             `json:"sustained_at_least,omitempty"`
	PeakRSS          int64            `json:"broker_peak_rss_bytes"`
}

// lost is every event lost in the row's runs.
func (r *batchRow) lost() uint64 {
	if len(r.Ramp) == 0 {
		return r.Step.Lost
	}
	var n uint64
	for _, st := range r.Ramp {
		n += st.Lost
	}
	return n
}

// batchRate is the batch scenario's fixed rate: half the memory scenario's sustained
// rate (its latency run's rate: one trigger without batching sustains it with room to
// spare), or def when the memory scenario did not sustain a step in this run.
func batchRate(mem *scenarioResult, def float64) (float64, string) {
	if st := mem.sustainedStep(); st != nil {
		return math.Round(st.IntendedRate / 2), fmt.Sprintf("half the memory scenario's sustained %.0f ev/s", st.IntendedRate)
	}
	return def, "the default (the memory scenario has no sustained rate in this run)"
}

// batchSearch is the short search from the fixed rate: doubling until a step fails,
// then bisecting to within 30%, at most 7 steps. --quick: one step at twice the rate.
func (s *suite) batchSearch(rate float64) searchPlan {
	p := searchPlan{Start: rate, Precision: 0.3, MaxSteps: 7}
	if s.o.quick {
		p.Precision, p.MaxSteps = 1, 2
	}
	return p
}

// batch runs the batch scenario.
func (s *suite) batch(ctx context.Context, mem *scenarioResult) *batchResult {
	def := float64(batchDefaultRate)
	if s.o.quick {
		def = batchDefaultRateQuick
	}
	br := &batchResult{Wait: batchWait}
	br.Rate, br.RateFrom = batchRate(mem, def)
	sp := s.batchSearch(br.Rate)
	br.SearchPrecision, br.RampSteps = sp.Precision, sp.MaxSteps
	for _, n := range batchSizes {
		if ctx.Err() != nil {
			break
		}
		row := s.batchOne(ctx, n, br.Rate)
		s.logf("batch N=%d: %.0f ev/s delivered, %.0f POSTs/s (%.1f events per POST), %.1f µs/event, lost %d, e2e p99 %.1f ms; sustained %.0f ev/s%s%s",
			n, row.DeliveredRate, row.PostRate, row.EventsPerPost, row.CPUPerDeliveredUS, row.lost(), row.Step.E2E.P99, row.Sustained, row.NotRun, row.Error)
		br.Rows = append(br.Rows, row)
	}
	return br
}

// batchOne measures one N at a fresh memory broker.
func (s *suite) batchOne(ctx context.Context, n int, rate float64) batchRow {
	row := batchRow{N: n}
	sc := scenario{Name: fmt.Sprintf("batch-%d", n), Channel: "memory", Triggers: 1, Matching: 1, Batch: n, BatchWait: batchWait}
	rcv, err := freeAddrs(1)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	b, err := startScenarioBroker(ctx, s.o.sluice, sc, filepath.Join(s.tmp, sc.Name), sc.Name+"-"+newRunID()[:6], rcv, s.pinned)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer b.Stop()
	t := target{URL: b.ingest, Receivers: rcv, Broker: b, Data: s.data}
	if _, _, err := runStep(ctx, t, stepSpec{Rate: rate / 2, Duration: primeDuration, Settle: s.p.Settle}); err != nil {
		row.Error = "priming run: " + err.Error()
		return row
	}
	posts0, err := b.subscriberAttempts(ctx)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	warm := 2 * s.p.StepWarmup
	s.logf("batch N=%d: %.0f/s for %s", n, rate, s.p.Half)
	st, res, err := runStep(ctx, t, stepSpec{Rate: rate, Duration: s.p.Half, Warmup: warm, Settle: s.p.Settle})
	if err != nil {
		row.Error = err.Error()
		return row
	}
	posts1, err := b.subscriberAttempts(ctx)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	st.Pass, st.Why = judge(st, defaultCriteria)
	row.Step = st
	skip := int(math.Ceil(warm.Seconds()))
	row.fill(meanDeliveryRate(deliveredPerSecond(res), skip, skip+int(s.p.Half/time.Second)), posts1-posts0)
	if row.Ramp, row.FindMax, err = s.search(ctx, t, sc.Name, s.batchSearch(rate), &st); err != nil {
		row.Error = "search: " + err.Error()
	}
	row.setSustained()
	if !b.Alive() {
		row.Error = "the broker died: " + b.logTail()
	}
	if hwm, err := b.HWM(); err == nil {
		row.PeakRSS = hwm
	}
	return row
}

// setSustained sets Sustained (and SustainedAtLeast) from the row's ramp steps.
func (r *batchRow) setSustained() {
	r.Sustained, r.SustainedAtLeast = 0, false
	i := sustained(r.Ramp)
	if i < 0 {
		return
	}
	r.Sustained, r.SustainedAtLeast = r.Ramp[i].IntendedRate, true
	for _, st := range r.Ramp {
		if !st.Pass {
			r.SustainedAtLeast = false
		}
	}
}

// fill derives the row's rates from its fixed-rate step, the mean delivered events/s
// and the POSTs counted over the step.
func (r *batchRow) fill(delivered float64, posts uint64) {
	r.DeliveredRate, r.Posts = delivered, posts
	if posts > 0 {
		r.EventsPerPost = float64(r.Step.Deliveries) / float64(posts)
		r.PostRate = delivered / r.EventsPerPost
	}
	if r.Step.Deliveries > 0 {
		r.CPUPerDeliveredUS = 1e6 * r.Step.CPUSeconds / float64(r.Step.Deliveries)
	}
}

// subscriberAttempts reads the broker's /metrics and returns its delivery attempts
// toward subscribers so far.
func (b *brokerProc) subscriberAttempts(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("broker /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("broker /metrics: %s", resp.Status)
	}
	return parseSubscriberAttempts(resp.Body)
}

// attemptsMetric is the delivery attempts counter of the broker's /metrics.
const attemptsMetric = "sluice_delivery_attempts_total"

// parseSubscriberAttempts sums the samples of sluice_delivery_attempts_total with
// dest="subscriber" in a Prometheus text exposition. It fails when there is none.
func parseSubscriberAttempts(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, attemptsMetric+"{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(labels, '}')
		if end < 0 {
			return 0, fmt.Errorf("%s: malformed sample %q", attemptsMetric, line)
		}
		if !strings.Contains(labels[:end], `dest="subscriber"`) {
			continue
		}
		f := strings.Fields(labels[end+1:])
		if len(f) == 0 {
			return 0, fmt.Errorf("%s: no value in %q", attemptsMetric, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: value %q: %w", attemptsMetric, f[0], err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading /metrics: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("no %s{dest=\"subscriber\"} sample in /metrics", attemptsMetric)
	}
	return uint64(sum), nil
}
