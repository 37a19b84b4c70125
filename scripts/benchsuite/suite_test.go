package main

import (
	"math"
	"strings"
	"testing"
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

func TestNextRate(t *testing.T) {
	p := rampPlan{Start: 1000, Coarse: 1.5, Fine: 1.1, MaxRate: 5000, MaxSteps: 10, Floor: 8}
	// Simulate a target that sustains up to 2,000/s and check the whole sequence.
	var steps []stepResult
	var rates []float64
	for {
		r, done := nextRate(steps, p)
		if done {
			break
		}
		rates = append(rates, r)
		steps = append(steps, step(r, r <= 2000))
		if len(rates) > 20 {
			t.Fatal("ramp does not end")
		}
	}
	want := []float64{1000, 1500, 2250, 1650, 1815, 1997, 2197}
	if len(rates) != len(want) {
		t.Fatalf("rates = %v, want %v", rates, want)
	}
	for i := range want {
		if math.Abs(rates[i]-want[i]) > 0.5 {
			t.Fatalf("rates = %v, want %v", rates, want)
		}
	}
	if got := steps[sustained(steps)].IntendedRate; got != 1997 {
		t.Errorf("sustained %v, want 1997", got)
	}

	for _, tc := range []struct {
		name  string
		steps []stepResult
		rate  float64
		done  bool
	}{
		{"max rate", []stepResult{step(4000, true)}, 0, true},
		{"first step fails: go lower", []stepResult{step(1000, false)}, 667, false},
		{"floor reached", []stepResult{step(1000, false), step(667, false), step(444, false), step(296, false), step(198, false), step(132, false)}, 0, true},
		{"fine step would reach the failure", []stepResult{step(1000, true), step(1090, false)}, 0, true},
		{"max steps", make([]stepResult, 10), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, done := nextRate(tc.steps, p)
			if done != tc.done || math.Abs(r-tc.rate) > 0.5 {
				t.Errorf("nextRate = %v, %v; want %v, %v", r, done, tc.rate, tc.done)
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
	}, Overloads: []*overloadResult{{SustainedRate: 7000, DeliveryRate: 6000, PeakRSS: 150 * mib, Requests: 10, Accepted: 5,
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
			o := &overloadResult{SustainedRate: 10000, DeliveryRate: 10000, Rate: tc.rate, Achieved: tc.achieved,
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
