package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
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

// rampPlan is the adaptive ramp: rates rise by Coarse from Start until a step fails,
// then rise by Fine from the highest sustained step until the next would reach the
// lowest failing rate. A failing first step is retried lower, down to Start/Floor.
type rampPlan struct {
	Start    float64
	Coarse   float64 // e.g. 1.5
	Fine     float64 // e.g. 1.1; ≤ 1 skips the fine phase
	MaxRate  float64
	MaxSteps int
	Floor    float64 // lowest rate tried is Start/Floor
}

// nextRate returns the next step's rate given the steps run so far, or done.
func nextRate(steps []stepResult, p rampPlan) (rate float64, done bool) {
	if len(steps) == 0 {
		return p.Start, false
	}
	if len(steps) >= p.MaxSteps {
		return 0, true
	}
	lowestFail := math.Inf(1)
	for _, s := range steps {
		if !s.Pass {
			lowestFail = math.Min(lowestFail, s.IntendedRate)
		}
	}
	best := sustained(steps)
	switch {
	case math.IsInf(lowestFail, 1): // coarse phase, all passed
		next := math.Round(steps[best].IntendedRate * p.Coarse)
		if next > p.MaxRate {
			return 0, true
		}
		return next, false
	case best < 0: // even the lowest step failed: go lower
		next := math.Round(lowestFail / p.Coarse)
		if next < p.Start/p.Floor {
			return 0, true
		}
		return next, false
	}
	if p.Fine <= 1 {
		return 0, true
	}
	next := math.Round(steps[best].IntendedRate * p.Fine)
	if next >= 0.99*lowestFail {
		return 0, true
	}
	return next, false
}
