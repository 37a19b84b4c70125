package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-broker/sluice/loadtest/bench"
)

// criteria decide whether a ramp step was sustained.
type criteria struct {
	MinSuccess float64 // share of requests answered 2xx
	MinKept    float64 // achieved rate / intended rate
	MaxP99MS   float64 // publish and end-to-end p99 ceiling ("not exploding"), ms
}

// defaultCriteria are the README's definition of a sustained step.
var defaultCriteria = criteria{MinSuccess: 0.999, MinKept: 0.95, MaxP99MS: 250}

// judge decides whether step s was sustained and, if not, says why.
func judge(s stepResult, c criteria) (bool, string) {
	var why []string
	if s.Requests == 0 {
		why = append(why, "no requests")
	}
	if s.Success < c.MinSuccess {
		why = append(why, fmt.Sprintf("success %.2f%% < %.1f%%", 100*s.Success, 100*c.MinSuccess))
	}
	if s.Lost > 0 {
		why = append(why, fmt.Sprintf("%d lost", s.Lost))
	}
	if s.IntendedRate > 0 && s.Rate < c.MinKept*s.IntendedRate {
		why = append(why, fmt.Sprintf("achieved %.0f/s < %.0f%% of %.0f/s", s.Rate, 100*c.MinKept, s.IntendedRate))
	}
	if s.Publish.P99 > c.MaxP99MS {
		why = append(why, fmt.Sprintf("publish p99 %.0f ms > %.0f ms", s.Publish.P99, c.MaxP99MS))
	}
	if s.E2E.P99 > c.MaxP99MS {
		why = append(why, fmt.Sprintf("e2e p99 %.0f ms > %.0f ms", s.E2E.P99, c.MaxP99MS))
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// sustained returns the index of the sustained step: the passing step with the highest
// intended rate such that every step at or below that rate passed. It returns -1 when
// there is none (the lowest step failed, or there are no steps).
func sustained(steps []stepResult) int {
	idx := make([]int, len(steps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return steps[idx[a]].IntendedRate < steps[idx[b]].IntendedRate })
	best := -1
	for _, i := range idx {
		if !steps[i].Pass {
			break
		}
		best = i
	}
	return best
}

// searchPlan is a search for the highest sustained rate: loadtest/bench's rate
// controller, the one `sluice bench --find-max` runs. It doubles the rate from Start
// after every passing step (halves it after failing ones until one passes), then
// bisects between the highest passing and the lowest failing rate until they are within
// Precision of each other, in at most MaxSteps steps.
type searchPlan struct {
	Start     float64
	Precision float64 // a fraction: 0.1 stops when the failing rate is within 10% of the passing one
	MaxSteps  int
}

// errBrokerDied ends a search whose broker died: its steps so far are kept.
var errBrokerDied = errors.New("the broker died")

// search finds the highest rate t sustains: each step is runStep at one constant rate,
// judged by judge. seed, if set, is a step already run at p.Start: it is the search's
// first step. It returns every step in the order run, and the search's record.
func (s *suite) search(ctx context.Context, t target, name string, p searchPlan, seed *stepResult) ([]stepResult, *bench.MaxSearch, error) {
	var steps []stepResult
	try := func(ctx context.Context, n int, rate float64) (bench.SearchStep, error) {
		if n > 1 && !steps[len(steps)-1].Pass { // let a backlog drain before the next, lower step
			sleepCtx(ctx, s.p.Settle)
		}
		var st stepResult
		if n == 1 && seed != nil {
			st = *seed
		} else {
			var err error
			if st, _, err = runStep(ctx, t, stepSpec{Rate: rate, Duration: s.p.Step, Warmup: s.p.StepWarmup, Settle: s.p.Settle}); err != nil {
				return bench.SearchStep{}, err
			}
			st.Pass, st.Why = judge(st, defaultCriteria)
			s.logf("%s: %6.0f/s sent %6.0f/s ok %.3f%% lost %d pub p99 %.1fms e2e p99 %.1fms cpu %.0fµs/ev → %v %s",
				name, rate, st.Rate, 100*st.Success, st.Lost, st.Publish.P99, st.E2E.P99, st.CPUPerEventUS, st.Pass, st.Why)
		}
		steps = append(steps, st)
		if t.Broker != nil && !t.Broker.Alive() {
			return bench.SearchStep{}, errBrokerDied
		}
		ss := bench.SearchStep{Step: n, Rate: rate, Events: rate, Pass: st.Pass, Achieved: st.Rate}
		if st.Why != "" {
			ss.Failed = []string{st.Why}
		}
		return ss, nil
	}
	sp := bench.Search{Start: p.Start, Precision: p.Precision, MaxSteps: p.MaxSteps, StepDuration: s.p.Step}
	fm, err := sp.Run(ctx, try)
	if fm != nil {
		fm.Objectives = defaultCriteria.String()
		fm.MaxEvents = fm.Max
	}
	if errors.Is(err, errBrokerDied) {
		err = nil // the caller reports the death, with the broker's log
	}
	return steps, fm, err
}

// String renders c like an --slo list.
func (c criteria) String() string {
	return fmt.Sprintf("success>=%g%%,loss=0,kept>=%g%%,p99<=%gms,e2e.p99<=%gms", 100*c.MinSuccess, 100*c.MinKept, c.MaxP99MS, c.MaxP99MS)
}
