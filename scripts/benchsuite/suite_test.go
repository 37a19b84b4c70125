package main

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/load"
)

func step(rate float64, pass bool) stepResult {
	return stepResult{IntendedRate: rate, Pass: pass}
}

func TestJudge(t *testing.T) {
	good := stepResult{IntendedRate: 1000, Rate: 999, Requests: 4000, Success: 1, Publish: latency{P99: 3}, E2E: latency{P99: 4}}
	for _, tc := range []struct {
		name string
		mod  func(*stepResult)
		pass bool
		why  string
	}{
		{"clean", func(*stepResult) {}, true, ""},
		{"success at the bound", func(s *stepResult) { s.Success = 0.999 }, true, ""},
		{"success below", func(s *stepResult) { s.Success = 0.998 }, false, "success 99.80%"},
		{"one lost", func(s *stepResult) { s.Lost = 1 }, false, "1 lost"},
		{"generator behind", func(s *stepResult) { s.Rate = 900 }, false, "achieved 900/s"},
		{"e2e exploding", func(s *stepResult) { s.E2E.P99 = 900 }, false, "e2e p99 900 ms"},
		{"publish exploding", func(s *stepResult) { s.Publish.P99 = 251 }, false, "publish p99 251 ms"},
		{"nothing sent", func(s *stepResult) { s.Requests = 0 }, false, "no requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.mod(&s)
			pass, why := judge(s, defaultCriteria)
			if pass != tc.pass || !strings.Contains(why, tc.why) || (tc.pass && why != "") {
				t.Errorf("judge = %v, %q; want %v, containing %q", pass, why, tc.pass, tc.why)
			}
		})
	}
}

func TestSustained(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []stepResult
		want  int
	}{
		{"none", nil, -1},
		{"first fails", []stepResult{step(1000, false)}, -1},
		{"all pass", []stepResult{step(1000, true), step(1500, true), step(2250, true)}, 2},
		{"rising then fail", []stepResult{step(1000, true), step(1500, true), step(2250, false)}, 1},
		// a pass above a failure does not count: the rate was not sustained reliably
		{"pass above a fail", []stepResult{step(1000, true), step(1500, false), step(1650, true)}, 0},
		// fine phase after the coarse failure, out of order in time
		{"fine phase", []stepResult{step(1000, true), step(1500, true), step(2250, false), step(1650, true), step(1815, true), step(1997, false)}, 4},
		{"lower retry after a failing first step", []stepResult{step(1000, false), step(667, true)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sustained(tc.steps); got != tc.want {
				t.Errorf("sustained = %d, want %d", got, tc.want)
			}
		})
	}
}

// The suite's sustained-rate search is loadtest/bench's: each step it runs is a real
// runStep (direct to an in-process receiver on 127.0.0.1), judged by judge, and the
// search's record names the same rates and verdicts as the steps. Rates are low and
// only the search's structure is asserted, never whether a step passed.
func TestSearchRunsBenchFindMax(t *testing.T) {
	rcv, err := freeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"hello":"world"}`)
	p := quickPlan
	p.Step, p.StepWarmup, p.Settle = 500*time.Millisecond, 0, 3*time.Second
	s := &suite{p: p, logf: t.Logf}
	tg := target{Receivers: rcv, Data: data}
	seedPass := stepResult{IntendedRate: 40, Rate: 40, Requests: 20, Success: 1, Pass: true}
	seedFail := stepResult{IntendedRate: 40, Rate: 40, Requests: 20, Success: 0.5, Pass: false, Why: "success 50.00% < 99.9%"}
	for _, tc := range []struct {
		name     string
		plan     searchPlan
		seed     *stepResult
		wantRan  int // steps run by the search, not seeded
		wantNext float64
	}{
		{"seed only", searchPlan{Start: 40, Precision: 1, MaxSteps: 1}, &seedPass, 0, 0},
		{"after a failing seed, half the rate", searchPlan{Start: 40, Precision: 1, MaxSteps: 2}, &seedFail, 1, 20},
		{"after a passing seed, twice the rate", searchPlan{Start: 40, Precision: 1, MaxSteps: 2}, &seedPass, 1, 80},
		{"unseeded", searchPlan{Start: 30, Precision: 1, MaxSteps: 1}, nil, 1, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, fm, err := s.search(t.Context(), tg, "test", tc.plan, tc.seed)
			if err != nil {
				t.Fatal(err)
			}
			if fm == nil || len(fm.Steps) != len(steps) || len(steps) != tc.plan.MaxSteps {
				t.Fatalf("%d steps, search record %+v; want %d", len(steps), fm, tc.plan.MaxSteps)
			}
			for i, st := range steps {
				if fm.Steps[i].Rate != st.IntendedRate || fm.Steps[i].Pass != st.Pass || fm.Steps[i].Achieved != st.Rate {
					t.Errorf("step %d: search %+v, step %+v", i, fm.Steps[i], st)
				}
			}
			if tc.seed != nil && !reflect.DeepEqual(steps[0], *tc.seed) {
				t.Errorf("first step %+v, want the seed %+v", steps[0], *tc.seed)
			}
			if tc.wantRan > 0 {
				last := steps[len(steps)-1]
				if last.IntendedRate != tc.wantNext || last.Requests == 0 || last.DurationS != p.Step.Seconds() {
					t.Errorf("step run: %+v, want %g/s for %s", last, tc.wantNext, p.Step)
				}
				if pass, why := judge(last, defaultCriteria); pass != last.Pass || why != last.Why {
					t.Errorf("step run judged %v %q, judge says %v %q", last.Pass, last.Why, pass, why)
				}
			}
			if i := sustained(steps); (i < 0 && fm.Max != 0) || (i >= 0 && fm.Max != steps[i].IntendedRate) {
				t.Errorf("search max %g, sustained step %d of %+v", fm.Max, i, steps)
			}
			if !strings.Contains(fm.Objectives, "success>=99.9%") || fm.Stopped == "" {
				t.Errorf("search record: objectives %q, stopped %q", fm.Objectives, fm.Stopped)
			}
		})
	}
}

func TestVerdicts(t *testing.T) {
	sc := func(name string, rate, perCPU, halfP99 float64) scenarioResult {
		return scenarioResult{scenario: scenario{Name: name}, Sustained: 0,
			Steps: []stepResult{{IntendedRate: rate, Pass: true, DeliveriesPerCPUSecond: perCPU}},
			Half:  &stepResult{IntendedRate: rate / 2, E2E: latency{P99: halfP99}}}
	}
	r := &results{Scenarios: []scenarioResult{
		sc(scDirect, 10000, 0, 1),
		sc(scMemory, 7000, 10000, 4),    // 0.7 × direct, p99 4 ms
		sc(scFanout, 1000, 4000, 9),     // 4000/10000 = 0.4 per core: not met
		sc(scFilter, 6500, 9000, 5),     // 0.93: met
		sc(scJetStream, 3000, 5000, 60), // 0.43 < 0.5, p99 60 > 50
		{scenario: scenario{Name: scKafka}, NotRun: "no kafka"},
	}, Overloads: []*overloadResult{{SustainedRate: 7000, DeliveryRate: 6000, Goodput: 6000.0 / 7000, Pairs: pairsOf(6000, 7000), PeakRSS: 150 * mib, Requests: 10, Accepted: 5,
		Rejected429: 5, Probe429: 100, Probe429RetryAfter: 100, ProbeRejectP99MS: 2, Settled: true, Alive: true, HealthMaxMS: 20}},
		Floor: &floorResult{Rows: []floorRow{{Layout: "pinned", Rate: 5000, NginxCPUUS: 40, SluiceCPUUS: 80, Ratio: 2}}}}
	got := map[string]verdict{}
	for _, v := range verdicts(r) {
		got[v.Target] = v
	}
	for _, tc := range []struct {
		prefix, status string
		ratio          float64
	}{
		{"memory broker, 1 trigger: sustained rate", met, 0.7},
		{"memory broker, 1 trigger: ≥ 6,000", met, 7000.0 / 6000},
		{"memory broker: e2e p99", met, 0.8},
		{"fan-out", notMet, 0.4},
		{"100 triggers", met, 6500.0 / 7000},
		{"overload: peak RSS", met, 0.75},
		{"overload: every answer", met, 0.002},
		{"overload: /healthz", met, 0.2},
		{"floor pinned, 5000 ev/s", notMet, 2 / 1.5},
		{"overload: delivery rate", notMet, 6000.0 / 7000},
		{"overload: zero accepted", met, 0},
		{"jetstream: sustained", notMet, 3000.0 / 7000 / 0.5},
		{"jetstream: e2e", notMet, 1.2},
		{"kafka: sustained", notRun, 0},
		{"kafka: e2e", notRun, 0},
	} {
		var v *verdict
		for k, x := range got {
			if strings.HasPrefix(k, tc.prefix) {
				x := x
				v = &x
			}
		}
		if v == nil {
			t.Errorf("no verdict %q", tc.prefix)
			continue
		}
		if v.Status != tc.status || math.Abs(v.Ratio-tc.ratio) > 1e-9 {
			t.Errorf("%s: %s ratio %v (%s%s); want %s ratio %v", v.Target, v.Status, v.Ratio, v.Measured, v.Why, tc.status, tc.ratio)
		}
	}

	// A scenario that ran but sustained nothing is judged, not excused.
	r.Scenarios[3] = scenarioResult{scenario: scenario{Name: scFilter}, Sustained: -1, Steps: []stepResult{step(1000, false)}}
	for _, v := range verdicts(r) {
		if strings.HasPrefix(v.Target, "100 triggers") && (v.Status != notMet || v.Ratio != 0) {
			t.Errorf("filter with no sustained step: %+v", v)
		}
	}
	// Missing overload: five not-run verdicts.
	r.Overloads = nil
	n := 0
	for _, v := range verdicts(r) {
		if strings.HasPrefix(v.Target, "overload") && v.Status == notRun {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d overload verdicts not run, want 5", n)
	}
}

func TestParseStatCPU(t *testing.T) {
	// comm with spaces and a ')' in it; utime 250, stime 150 ticks = 4 s
	line := "1234 (sl uice) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 8 0 100 1000 200"
	got, err := parseStatCPU(line)
	if err != nil || got.Seconds() != 4 {
		t.Errorf("parseStatCPU = %v, %v; want 4s", got, err)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Error("parseStatCPU(garbage) succeeded")
	}
}

// TestOverloadWasOverload: a run counts as an overload if something was refused or the
// generator was held back (requests waited for room); one that took everything at the
// offered rate is not met, however much it delivered.
func TestOverloadWasOverload(t *testing.T) {
	for _, tc := range []struct {
		name               string
		rejected           uint64
		rate, achieved     float64
		want               string
		mentionsNoOverload bool
	}{
		{"refusals", 100, 20000, 19500, met, false},
		{"held back, nothing refused", 0, 20000, 12000, met, false},
		{"took everything at the rate offered", 0, 20000, 19500, notMet, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &overloadResult{SustainedRate: 10000, DeliveryRate: 10000, Goodput: 1, Pairs: pairsOf(10000, 10000), Rate: tc.rate, Achieved: tc.achieved,
				Rejected429: tc.rejected, Settled: true, Alive: true}
			var v *verdict
			for _, x := range overloadVerdicts(o) {
				if strings.Contains(x.Target, "delivery rate") {
					v = &x
				}
			}
			if v == nil {
				t.Fatal("no delivery verdict")
			}
			if v.Status != tc.want || strings.Contains(v.Measured, "not an overload") != tc.mentionsNoOverload {
				t.Errorf("%s: %s", v.Status, v.Measured)
			}
		})
	}
}

func TestBrokerConfigBatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sc        scenario
		want, not []string
	}{
		{"no batch", scenario{Triggers: 1, Matching: 1}, []string{"name: t000\n  namespace: bench\nspec:"}, []string{"annotations", "delivery-batch"}},
		{"batch of 10", scenario{Triggers: 1, Matching: 1, Batch: 10, BatchWait: "PT0.005S"},
			[]string{"  annotations:\n    sluice.dev/delivery-batch: \"10\"\n    sluice.dev/delivery-batch-wait: PT0.005S\nspec:"}, nil},
		{"batch without a wait", scenario{Triggers: 2, Matching: 1, Batch: 100},
			[]string{"name: t001\n  namespace: bench\n  annotations:\n    sluice.dev/delivery-batch: \"100\"\nspec:"}, []string{"delivery-batch-wait"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := brokerConfig(tc.sc, "b", []string{"http://127.0.0.1:1/"})
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("config lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("config has %q:\n%s", n, got)
				}
			}
		})
	}
}

func TestParseSubscriberAttempts(t *testing.T) {
	const head = "# HELP sluice_delivery_attempts_total HTTP delivery attempts.\n# TYPE sluice_delivery_attempts_total counter\n"
	for _, tc := range []struct {
		name, text string
		want       uint64
		err        string
	}{
		{"sums subscriber results and triggers", head +
			`sluice_delivery_attempts_total{dest="deadletter",result="2xx",trigger="bench/t000"} 7` + "\n" +
			`sluice_delivery_attempts_total{dest="reply",result="2xx",trigger="bench/t000"} 5` + "\n" +
			`sluice_delivery_attempts_total{dest="subscriber",result="2xx",trigger="bench/t000"} 1.2345e+06` + "\n" +
			`sluice_delivery_attempts_total{dest="subscriber",result="5xx",trigger="bench/t000"} 3` + "\n" +
			`sluice_delivery_attempts_total{dest="subscriber",result="2xx",trigger="bench/t001"} 2` + "\n" +
			`sluice_delivery_retries_total{trigger="bench/t000"} 100` + "\n", 1234505, ""},
		{"zero", head + `sluice_delivery_attempts_total{dest="subscriber",result="2xx",trigger="bench/t"} 0` + "\n", 0, ""},
		{"no sample", head + `sluice_delivery_attempts_total{dest="reply",result="2xx",trigger="bench/t"} 4` + "\n", 0, "no sluice_delivery_attempts_total"},
		{"bad value", `sluice_delivery_attempts_total{dest="subscriber",result="2xx",trigger="bench/t"} many` + "\n", 0, `value "many"`},
		{"no value", `sluice_delivery_attempts_total{dest="subscriber",result="2xx",trigger="bench/t"}` + "\n", 0, "no value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSubscriberAttempts(strings.NewReader(tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseSubscriberAttempts = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestBatchRate(t *testing.T) {
	mem := &scenarioResult{Sustained: 1, Steps: []stepResult{step(10000, true), step(17091, true), step(25000, false)}}
	none := &scenarioResult{Sustained: -1, Steps: []stepResult{step(1000, false)}}
	for _, tc := range []struct {
		name string
		mem  *scenarioResult
		want float64
		from string
	}{
		{"half the memory sustained rate", mem, 8546, "17091"},
		{"memory sustained nothing", none, 8000, "default"},
		{"memory not run", nil, 8000, "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := batchRate(tc.mem, 8000)
			if got != tc.want || !strings.Contains(from, tc.from) {
				t.Errorf("batchRate = %v, %q; want %v, containing %q", got, from, tc.want, tc.from)
			}
		})
	}
}

func TestBatchRowFill(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		deliveries            uint64
		cpuS                  float64
		delivered             float64
		posts                 uint64
		perPost, postRate, us float64
	}{
		{"unbatched", 170000, 8.5, 10000, 170000, 1, 10000, 50},
		{"batches of 10", 170000, 5.1, 10000, 17000, 10, 1000, 30},
		{"wait-limited batches", 170000, 3.4, 10000, 3400, 50, 200, 20},
		{"no POSTs counted", 170000, 3.4, 10000, 0, 0, 0, 20},
		{"nothing delivered", 0, 1, 0, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := batchRow{Step: stepResult{Deliveries: tc.deliveries, CPUSeconds: tc.cpuS}}
			r.fill(tc.delivered, tc.posts)
			if r.DeliveredRate != tc.delivered || r.Posts != tc.posts || math.Abs(r.EventsPerPost-tc.perPost) > 1e-9 ||
				math.Abs(r.PostRate-tc.postRate) > 1e-9 || math.Abs(r.CPUPerDeliveredUS-tc.us) > 1e-9 {
				t.Errorf("fill = %+v; want %v events per POST, %v POSTs/s, %v µs", r, tc.perPost, tc.postRate, tc.us)
			}
		})
	}
}

// batchRows returns a batch result with rows for N = 1, 10, 100 at the given CPU per
// delivered event and losses.
func batchRows(cpu [3]float64, lost [3]uint64) *batchResult {
	b := &batchResult{Rate: 8000}
	for i, n := range batchSizes {
		st := stepResult{Requests: 100, Accepted: 100, Lost: lost[i]}
		b.Rows = append(b.Rows, batchRow{N: n, Step: st, Ramp: []stepResult{st, {Requests: 10, Accepted: 10}}, CPUPerDeliveredUS: cpu[i]})
	}
	return b
}

func TestBatchVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name           string
		b              *batchResult
		loss, cpu      string
		cpuRatio       float64
		measured, why  string
		mod            func(*batchResult)
		lossMeasuredIn string
	}{
		{name: "not selected", b: nil, loss: notRun, cpu: notRun, why: "not selected"},
		{name: "clean", b: batchRows([3]float64{60, 30, 20}, [3]uint64{}), loss: met, cpu: met, cpuRatio: 0.5, lossMeasuredIn: "N=100: 0 lost of 110 accepted"},
		{name: "a loss at N=10", b: batchRows([3]float64{60, 30, 20}, [3]uint64{0, 1, 0}), loss: notMet, cpu: met, cpuRatio: 0.5, lossMeasuredIn: "N=10: 1 lost of 110"},
		{name: "a loss in a ramp step", b: batchRows([3]float64{60, 30, 20}, [3]uint64{}), loss: notMet, cpu: met, cpuRatio: 0.5,
			mod: func(b *batchResult) { b.Rows[2].Ramp[1].Lost = 2 }, lossMeasuredIn: "N=100: 2 lost"},
		{name: "batching costs more", b: batchRows([3]float64{60, 30, 61}, [3]uint64{}), loss: met, cpu: notMet, cpuRatio: 61.0 / 60},
		{name: "equal is not less", b: batchRows([3]float64{60, 60, 20}, [3]uint64{}), loss: met, cpu: notMet, cpuRatio: 1},
		{name: "N=100 missing", b: batchRows([3]float64{60, 30, 20}, [3]uint64{}), loss: notRun, cpu: notRun, why: "N=100 not run",
			mod: func(b *batchResult) { b.Rows = b.Rows[:2] }},
		{name: "N=1 failed before measuring", b: batchRows([3]float64{60, 30, 20}, [3]uint64{}), loss: notRun, cpu: notRun, why: "N=1 failed: boom",
			mod: func(b *batchResult) { b.Rows[0] = batchRow{N: 1, Error: "boom"} }},
		{name: "broker died after the fixed run", b: batchRows([3]float64{60, 30, 20}, [3]uint64{}), loss: notMet, cpu: met, cpuRatio: 0.5,
			mod: func(b *batchResult) { b.Rows[1].Error = "the broker died" }, lossMeasuredIn: "error: the broker died"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mod != nil {
				tc.mod(tc.b)
			}
			vs := batchVerdicts(tc.b)
			if len(vs) != 2 {
				t.Fatalf("%d verdicts, want 2", len(vs))
			}
			loss, cpu := vs[0], vs[1]
			if loss.Status != tc.loss || cpu.Status != tc.cpu || math.Abs(cpu.Ratio-tc.cpuRatio) > 1e-9 {
				t.Errorf("verdicts %s / %s (ratio %v); want %s / %s (ratio %v): %+v", loss.Status, cpu.Status, cpu.Ratio, tc.loss, tc.cpu, tc.cpuRatio, vs)
			}
			if !strings.Contains(loss.Why, tc.why) || !strings.Contains(loss.Measured, tc.lossMeasuredIn) {
				t.Errorf("loss verdict %+v; want why containing %q, measured containing %q", loss, tc.why, tc.lossMeasuredIn)
			}
		})
	}
}

func TestCapacityStepRate(t *testing.T) {
	for _, tc := range []struct {
		channel      string
		ramp, memory float64
		want         float64
	}{
		{scJetStream, 3798, 18799, 28199}, // 1.5 × the memory channel's: saturates any channel
		{scKafka, 750, 0, 3000},           // no memory figure: 4 × its own ramp's
		{scMemory, 18799, 18799, 28199},
		{scMemory, 18799, 0, 28199},
		{scKafka, 20000, 18799, 30000}, // a ramp above memory's: 1.5 × that
	} {
		if got := capacityStepRate(tc.channel, tc.ramp, tc.memory); got != tc.want {
			t.Errorf("capacityStepRate(%s, %v, %v) = %v, want %v", tc.channel, tc.ramp, tc.memory, got, tc.want)
		}
	}
	for d, want := range map[time.Duration]int{12 * time.Second: 5, 3 * time.Second: 1, time.Second: 1, 8 * time.Second: 4, time.Minute: 5} {
		if got := capacityTail(d); got != want {
			t.Errorf("capacityTail(%s) = %d, want %d", d, got, want)
		}
	}
}

func TestFairSustained(t *testing.T) {
	for _, tc := range []struct {
		name string
		ramp float64
		c    *capacityResult
		want float64
		from string
	}{
		{"no capacity step", 3798, nil, 3798, "ramp"},
		{"capacity above the ramp", 3798, &capacityResult{Delivery: 9123.6}, 9124, "capacity"},
		{"capacity below the ramp", 18799, &capacityResult{Delivery: 15000}, 18799, "ramp"},
		{"failed capacity step", 3798, &capacityResult{Delivery: 9000, Error: "boom"}, 3798, "ramp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := fairSustained(tc.ramp, tc.c)
			if got != tc.want || from != tc.from {
				t.Errorf("fairSustained = %v, %q; want %v, %q", got, from, tc.want, tc.from)
			}
		})
	}
}

func TestOverloadVerdictsCapacity(t *testing.T) {
	base := overloadResult{Channel: scKafka, Factor: 2, Connections: 256, SustainedRate: 9000, SustainedFrom: "capacity", RampSustainedRate: 750,
		DeliveryRate: 8500, Goodput: 8500.0 / 9000, Pairs: pairsOf(8500, 9000), Requests: 100, Accepted: 60, Rejected429: 40, Settled: true, Alive: true,
		Capacity: &capacityResult{Delivery: 9000, Accepted: 1000, Refused: 10, Settled: true}}
	for _, tc := range []struct {
		name               string
		mod                func(*overloadResult)
		delivery, loss     string
		deliveryMeasuredIn string
	}{
		{"judged by the pairs", func(*overloadResult) {}, met, met, "median 0.94× of 1 pairs (overload / reference ev/s: 8500/9000; lowest overload second 0); sustained: the measured capacity (the ramp's was 750)"},
		{"sustained from the ramp", func(o *overloadResult) {
			o.SustainedRate, o.SustainedFrom, o.RampSustainedRate, o.Capacity.Delivery = 10000, "ramp", 10000, 7000
		}, met, met, "sustained: the ramp's (measured capacity 7000)"},
		{"a collapse under overload", func(o *overloadResult) {
			o.Pairs, o.Goodput = append(pairsOf(3000, 9000), pairsOf(2500, 8800)...), 0.3
		}, notMet, met, "3000/9000, 2500/8800"},
		{"a loss in a reference phase", func(o *overloadResult) {
			o.Pairs = pairsOf(8500, 9000)
			o.Pairs[0].Reference.Lost = 2
		}, met, notMet, "8500/9000"},
		{"a reference phase not settled", func(o *overloadResult) {
			o.Pairs = pairsOf(8500, 9000)
			o.Pairs[0].Reference.Settled = false
		}, met, notMet, "8500/9000"},
		{"capacity step failed", func(o *overloadResult) {
			o.SustainedRate, o.SustainedFrom, o.Capacity.Error = 750, "ramp", "boom"
		}, met, met, "capacity step failed: boom"},
		{"a loss in the capacity step", func(o *overloadResult) { o.Capacity.Lost = 1 }, met, notMet, ""},
		{"capacity step not settled", func(o *overloadResult) { o.Capacity.Settled = false }, met, notMet, ""},
		{"nothing refused", func(o *overloadResult) { o.Rejected429 = 0 }, notMet, met, "not an overload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			c := *base.Capacity
			o.Capacity = &c
			tc.mod(&o)
			vs := overloadVerdicts(&o)
			if vs[2].Status != tc.delivery || vs[3].Status != tc.loss || !strings.Contains(vs[2].Measured, tc.deliveryMeasuredIn) {
				t.Errorf("delivery %s (%s), loss %s (%s); want %s containing %q, %s", vs[2].Status, vs[2].Measured, vs[3].Status, vs[3].Measured,
					tc.delivery, tc.deliveryMeasuredIn, tc.loss)
			}
		})
	}
}

func TestSustainedCell(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    overloadResult
		want string
	}{
		{"capacity used", overloadResult{SustainedRate: 9000, SustainedFrom: "capacity", RampSustainedRate: 750, Capacity: &capacityResult{Delivery: 9000, Refused: 5}}, "750 / **9000**"},
		{"ramp used", overloadResult{SustainedRate: 18799, SustainedFrom: "ramp", RampSustainedRate: 18799, Capacity: &capacityResult{Delivery: 15000, Refused: 5}}, "**18799** / 15000"},
		{"nothing refused", overloadResult{SustainedRate: 5202, SustainedFrom: "capacity", RampSustainedRate: 4000, Capacity: &capacityResult{Delivery: 5202}}, "4000 / **5202 (nothing refused: a lower bound)**"},
		{"failed step", overloadResult{SustainedRate: 750, SustainedFrom: "ramp", RampSustainedRate: 750, Capacity: &capacityResult{Error: "x"}}, "**750** / failed"},
		{"results before the capacity step", overloadResult{SustainedRate: 3798}, "**3798** / —"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sustainedCell(&tc.o); got != tc.want {
				t.Errorf("sustainedCell = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestREADMEBatchAndOverload(t *testing.T) {
	b := batchRows([3]float64{61.25, 30.5, 20.25}, [3]uint64{})
	b.RateFrom = "half the memory scenario's sustained 16000 ev/s"
	b.Wait = batchWait
	for i := range b.Rows {
		b.Rows[i].DeliveredRate, b.Rows[i].EventsPerPost = 7999, float64(batchSizes[i])*0.9
		b.Rows[i].PostRate, b.Rows[i].Sustained = 7999/b.Rows[i].EventsPerPost, float64(10000*(i+1))
	}
	b.Rows[2].SustainedAtLeast = true
	b.SearchPrecision, b.RampSteps = 0.3, 7
	b.Rows = append(b.Rows, batchRow{N: 1000, NotRun: "just because"})
	r := &results{Plan: fullPlan, LoadAvg: map[string]string{}, Batch: b,
		Overloads: []*overloadResult{{Channel: scJetStream, Factor: 2, Connections: 256, SustainedRate: 9000, SustainedFrom: "capacity",
			RampSustainedRate: 3798, Capacity: &capacityResult{Delivery: 9000, Refused: 3}, Rate: 18000, DeliveryRate: 8500, ReportDir: "results/x",
			Goodput: 0.94, Pairs: append(pairsOf(8500, 9000), pairsOf(8400, 8900)...)}}}
	name := filepath.Join(t.TempDir(), "README.md")
	if err := writeREADME(name, r); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	for _, want := range []string{
		"### Batched delivery: N events per POST",
		"go run ./scripts/benchsuite --scenarios memory,batch",
		"`sluice.dev/delivery-batch: \"N\"`",
		"`sluice.dev/delivery-batch-wait: PT0.005S`",
		"8000 ev/s (half the memory scenario's sustained 16000 ev/s) for 15s",
		"| 1 | 0.9 | 7999 | 8888 | 61.2 | 0 | 0.0 | 10000 | 0.0 |",
		"| 10 | 9.0 | 7999 | 889 | 30.5 | 0 | 0.0 | 20000 | 0.0 |",
		"| 100 | 90.0 | 7999 | 89 | 20.2 | 0 | 0.0 | ≥ 30000 | 0.0 |",
		"then bisecting until the failing rate is\nwithin 30.00% of the passing one; the usual pass criteria; at most 7 steps",
		"| 1000 | not run (just because) |",
		"| jetstream | 2× | 256 | 3798 / **9000** | 18000 (achieved 0) |",
		"| 8500 (0) | 0.94× (8500/9000, 8400/8900) |",
		"**reference phase**",
		"capacity step",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("README lacks %q", want)
		}
	}
	// Without a batch scenario there is no batch section.
	r.Batch = nil
	if err := writeREADME(name, r); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(name); strings.Contains(string(data), "### Batched delivery") {
		t.Error("README has a batch section without a batch scenario")
	}
}

func TestBatchRowSustained(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []stepResult
		want    float64
		atLeast bool
	}{
		{"no steps", nil, 0, false},
		{"fixed rate failed", []stepResult{step(8000, false), step(10400, false)}, 0, false},
		{"ramp found a failure", []stepResult{step(8000, true), step(10400, true), step(13520, false)}, 10400, false},
		{"ramp hit its step limit", []stepResult{step(8000, true), step(10400, true)}, 10400, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := batchRow{Ramp: tc.steps, Sustained: 1, SustainedAtLeast: true}
			r.setSustained()
			if r.Sustained != tc.want || r.SustainedAtLeast != tc.atLeast {
				t.Errorf("setSustained: %v, at least %v; want %v, %v", r.Sustained, r.SustainedAtLeast, tc.want, tc.atLeast)
			}
		})
	}
}

func TestMergeSteps(t *testing.T) {
	m := mergeSteps([]stepResult{
		{Accepted: 1000, CPUSeconds: 0.05, Success: 1, Lost: 0, Rate: 5000},
		{Accepted: 3000, CPUSeconds: 0.03, Success: 0.99, Lost: 2, Rate: 4000},
	})
	// 0.08 s over 4,000 events: 20 µs, not the mean of 50 and 10 µs.
	if m.CPUPerEventUS < 19.99 || m.CPUPerEventUS > 20.01 || m.Accepted != 4000 || m.Success != 0.99 || m.Lost != 2 || m.Rate != 4500 {
		t.Errorf("mergeSteps = %+v; want 20 µs/event over 4000 accepted, success 0.99, 2 lost, rate 4500", m)
	}
	if got := len(floorOrder); got != 4 || floorOrder[0] != floorOrder[3] || floorOrder[1] != floorOrder[2] || floorOrder[0] == floorOrder[1] {
		t.Errorf("floorOrder = %v; want ABBA", floorOrder)
	}
}

func TestLoadSeconds(t *testing.T) {
	for _, tc := range []struct {
		name         string
		attack, wait time.Duration
		planned      time.Duration
		want         int
	}{
		{"on schedule", 20 * time.Second, 3 * time.Millisecond, 20 * time.Second, 20},
		{"a hair short of planned", 19990 * time.Millisecond, 0, 20 * time.Second, 20},
		{"pushed back: three times planned", 61 * time.Second, 400 * time.Millisecond, 20 * time.Second, 61},
		{"the last answers late", 20 * time.Second, 2500 * time.Millisecond, 20 * time.Second, 22},
		{"partial last second left out", 47900 * time.Millisecond, 0, 12 * time.Second, 47},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &bench.Result{Load: &load.Result{Attack: tc.attack, Wait: tc.wait}}
			if got := loadSeconds(res, tc.planned); got != tc.want {
				t.Errorf("loadSeconds(attack %s, wait %s, planned %s) = %d, want %d", tc.attack, tc.wait, tc.planned, got, tc.want)
			}
		})
	}
	if got := loadSeconds(&bench.Result{}, 12*time.Second); got != 12 {
		t.Errorf("loadSeconds without a load result = %d, want the planned 12", got)
	}
}

// pairsOf is one reference/overload pair: the overload phase delivered over, the
// reference phase ref, nothing lost, everything delivered.
func pairsOf(over, ref float64) []overloadPair {
	return []overloadPair{{Reference: &capacityResult{Delivery: ref, Accepted: 100, Settled: true}, Delivery: over, Ratio: over / ref}}
}

func TestMedianRatio(t *testing.T) {
	failedRef := overloadPair{Reference: &capacityResult{Error: "boom"}, Delivery: 9000}
	for _, tc := range []struct {
		name  string
		pairs []overloadPair
		want  float64
	}{
		{"none", nil, 0},
		{"one", pairsOf(9000, 10000), 0.9},
		{"odd: the middle one, not the mean", append(append(pairsOf(1000, 10000), pairsOf(9500, 10000)...), pairsOf(9800, 10000)...), 0.95},
		{"even: the mean of the middle two", append(append(append(pairsOf(8000, 10000), pairsOf(9000, 10000)...), pairsOf(9500, 10000)...), pairsOf(30000, 10000)...), 0.925},
		{"a failed reference counts as 0", append(append(pairsOf(9500, 10000), pairsOf(9600, 10000)...), failedRef), 0.95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := medianRatio(tc.pairs); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("medianRatio = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMergeOverloads(t *testing.T) {
	a := &overloadResult{Requests: 10, Accepted: 6, Rejected429: 3, Rejected503: 1, Lost: 0, Settled: true, Achieved: 18000,
		DeliveryRate: 9000, MinDeliveryRate: 7000, HealthMaxMS: 40, HealthSlowestPath: "/metrics", HealthAnswers: 50, HealthOver100: 0,
		Probe429: 5, Probe429RetryAfter: 5, ProbeRejectP99MS: 3, CPUSeconds: 2, PeakRSS: 100, Alive: true, ReportDir: "a"}
	b := &overloadResult{Requests: 20, Accepted: 15, Rejected429: 5, Lost: 1, Settled: false, Achieved: 15000,
		DeliveryRate: 8000, MinDeliveryRate: 7500, HealthMaxMS: 120, HealthSlowestPath: "/readyz", HealthAnswers: 60, HealthOver100: 1,
		Probe429: 7, Probe429RetryAfter: 6, ProbeRejectP99MS: 2, CPUSeconds: 3, PeakRSS: 150, Alive: true, ReportDir: "b"}
	c := &overloadResult{Requests: 5, Accepted: 5, Settled: true, Achieved: 19000, DeliveryRate: 9500, MinDeliveryRate: 9000,
		HealthMaxMS: 10, HealthSlowestPath: "/healthz", HealthAnswers: 40, Probe429: 0, ProbeRejectP99MS: 1, CPUSeconds: 1,
		PeakRSS: 160, Alive: false, ReportDir: "c"}
	m := mergeOverloads([]*overloadResult{a, b, c})
	want := overloadResult{Requests: 35, Accepted: 26, Rejected429: 8, Rejected503: 1, Lost: 1, Settled: false, Achieved: 15000,
		DeliveryRate: 9000, MinDeliveryRate: 7000, HealthMaxMS: 120, HealthSlowestPath: "/readyz", HealthAnswers: 150, HealthOver100: 1,
		Probe429: 12, Probe429RetryAfter: 11, ProbeRejectP99MS: 3, CPUSeconds: 6, PeakRSS: 160, Alive: false, ReportDir: "c"}
	if !reflect.DeepEqual(*m, want) {
		t.Errorf("merged:\n%+v\nwant\n%+v", *m, want)
	}
	// The phases themselves are left as they were.
	if a.Requests != 10 || c.Requests != 5 {
		t.Errorf("mergeOverloads changed its phases: %d, %d requests", a.Requests, c.Requests)
	}
}
