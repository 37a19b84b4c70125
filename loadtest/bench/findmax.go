package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/slo"
)

// Search configures FindMax: it ramps from Start, doubling the rate after every step that
// holds the objectives, until one fails (or halves it until one passes, if the first
// fails), then bisects between the highest passing and the lowest failing rate until
// they are within Precision of each other. Each step is a whole bench run of
// StepDuration (after the load's warm-up, if any) at a constant rate.
type Search struct {
	Objectives   []slo.Objective // what a step must hold; at least one
	Start        float64         // the first step's rate, requests/s (≥ 1)
	Precision    float64         // stop when fail − pass ≤ Precision × pass; a fraction in (0, 1]
	MaxSteps     int             // the step budget (≥ 1)
	StepDuration time.Duration   // how long each step sends (after its warm-up)
	// OnStep, if set, is called after each step with its outcome.
	OnStep func(SearchStep)
}

// SearchStep is one step of a search: a rate tried and its verdict.
type SearchStep struct {
	Step   int     `json:"step"`              // from 1
	Rate   float64 `json:"rate"`              // requests/s
	Events float64 `json:"events_per_second"` // Rate × events per request
	Pass   bool    `json:"pass"`
	// Failed lists the objectives the step missed, as "clause: actual FAIL".
	Failed []string `json:"failed,omitempty"`
	// Achieved is the rate the generator dispatched, requests/s.
	Achieved float64 `json:"achieved_rate"`
	// Undecided says the objectives held but the generator fell short of the rate
	// (below load.KeptRate of it): the step says nothing about the rate asked for. A
	// step that fails is decided however short the generator fell, since the target
	// failed at a lower rate already.
	Undecided bool `json:"undecided,omitempty"`
}

// MaxSearch is the outcome of a search, saved in results.json as "find_max".
type MaxSearch struct {
	Objectives   string        `json:"objectives"`
	Start        float64       `json:"start_rate"`
	Precision    float64       `json:"precision"`
	MaxSteps     int           `json:"max_steps"`
	StepDuration time.Duration `json:"step_duration_ns"`
	// Max is the highest rate (requests/s) that held every objective; 0 if none did.
	Max float64 `json:"max"`
	// MaxEvents is Max in events/s (Max × events per request).
	MaxEvents float64 `json:"max_events_per_second"`
	// Ceiling is the lowest rate that failed; 0 if none did.
	Ceiling float64 `json:"ceiling,omitempty"`
	// Converged says Max and Ceiling are within Precision of each other.
	Converged bool         `json:"converged"`
	Stopped   string       `json:"stopped"` // why the search ended
	Steps     []SearchStep `json:"steps"`
}

// validate checks a search's parameters, naming the flag behind each. The objectives
// are FindMax's to check: Run's caller may judge steps its own way.
func (s Search) validate() error {
	switch {
	case !(s.Start >= 1) || math.IsInf(s.Start, 0):
		return fmt.Errorf("find-max: --start-rate %g: want at least 1 request/s", s.Start)
	case !(s.Precision > 0 && s.Precision <= 1):
		return fmt.Errorf("find-max: --precision %g%%: want more than 0 and at most 100", 100*s.Precision)
	case s.MaxSteps < 1:
		return fmt.Errorf("find-max: --max-steps %d: want at least 1", s.MaxSteps)
	case s.StepDuration <= 0:
		return fmt.Errorf("find-max: --duration %s: want a positive step duration", s.StepDuration)
	}
	return nil
}

// Trial runs one step of a search at rate (requests/s) and judges it; number counts
// steps from 1. FindMax's trial is a bench run judged by the objectives; `make bench`
// (scripts/benchsuite) brings its own, a broker step judged by its pass criteria.
type Trial func(ctx context.Context, number int, rate float64) (SearchStep, error)

// Run is the rate controller: ramp, then bisect, within the step budget, calling try
// for each step. s.Objectives only names the objectives in the result (try judges).
// It returns the search so far when try fails or ctx ends, with the error.
func (s Search) Run(ctx context.Context, try Trial) (*MaxSearch, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	fm := &MaxSearch{Start: s.Start, Precision: s.Precision, MaxSteps: s.MaxSteps, StepDuration: s.StepDuration}
	var texts []string
	for _, o := range s.Objectives {
		texts = append(texts, o.Text)
	}
	fm.Objectives = strings.Join(texts, ",")
	lo, hi := 0.0, 0.0 // highest pass, lowest fail (0: none yet)
	rate := math.Round(s.Start)
loop:
	for {
		if len(fm.Steps) >= s.MaxSteps {
			fm.Stopped = fmt.Sprintf("step budget (--max-steps %d) spent", s.MaxSteps)
			break
		}
		if err := ctx.Err(); err != nil {
			fm.Stopped = "interrupted"
			fm.Max, fm.Ceiling = lo, hi
			return fm, err
		}
		st, err := try(ctx, len(fm.Steps)+1, rate)
		if err != nil {
			fm.Stopped = "error: " + err.Error()
			fm.Max, fm.Ceiling = lo, hi
			return fm, err
		}
		fm.Steps = append(fm.Steps, st)
		if s.OnStep != nil {
			s.OnStep(st)
		}
		switch {
		case st.Undecided:
			fm.Stopped = fmt.Sprintf("the generator could not send %g requests/s (it sent %.0f/s, which the target held): the target's max is at least that; give the generator more CPU or --connections", rate, st.Achieved)
			break loop
		case st.Pass:
			lo = rate
		default:
			hi = rate
		}
		switch {
		case hi == 0: // ramp up
			rate = 2 * lo
		case lo == 0: // ramp down
			if rate = math.Floor(hi / 2); rate < 1 {
				fm.Stopped = "every rate failed, down to 1 request/s"
				break loop
			}
		default: // bisect
			mid := math.Round((lo + hi) / 2)
			if hi-lo <= s.Precision*lo || mid <= lo || mid >= hi {
				fm.Converged = true
				fm.Stopped = fmt.Sprintf("converged: %g passed, %g failed (precision %g%%)", lo, hi, 100*s.Precision)
				break loop
			}
			rate = mid
		}
	}
	fm.Max, fm.Ceiling = lo, hi
	return fm, nil
}

// FindMax searches for the highest constant rate that holds s.Objectives for
// s.StepDuration, running one bench run per step (o.Load's pacer and run id are
// replaced per step; its warm-up, if any, precedes every step at that step's rate). It
// returns the result of the highest passing step — or of the last step, if none passed —
// with the search in Result.FindMax.
func FindMax(ctx context.Context, o Options, s Search) (*Result, error) {
	if len(s.Objectives) == 0 {
		return nil, errors.New("find-max: --slo is required: the objectives each rate must hold")
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	if o.Load.Template == nil {
		return nil, errors.New("find-max: an event template is required")
	}
	base := o.Load.Template
	epr := float64(base.EventsPerRequest())
	var best, last *Result
	try := func(ctx context.Context, n int, rate float64) (SearchStep, error) {
		so := o
		var p pacer.Pacer = pacer.Constant{Rate: rate, Duration: s.StepDuration}
		so.Load.WarmupHits = 0
		if o.Load.Warmup > 0 {
			w := pacer.Warmup{Rate: rate, Duration: o.Load.Warmup, Next: p}
			so.Load.WarmupHits, p = w.Hits(), w
		}
		so.Load.Pacer = p
		t, err := cevent.NewTemplate(base.Mode, base.Type, base.Source, fmt.Sprintf("%s-%d", base.Run, n), base.Data, base.BatchSize)
		if err != nil {
			return SearchStep{}, err
		}
		so.Load.Template = t
		res, err := Run(ctx, so)
		if err != nil {
			return SearchStep{}, fmt.Errorf("step %d (%g requests/s): %w", n, rate, err)
		}
		if res.Load.Cancelled {
			return SearchStep{}, fmt.Errorf("step %d (%g requests/s): %w", n, rate, context.Cause(ctx))
		}
		st := SearchStep{Step: n, Rate: rate, Events: rate * epr, Achieved: res.Load.Rate}
		verdicts, pass := slo.Check(s.Objectives, res.Metrics())
		st.Pass = pass
		if pass && res.Load.Rate < load.KeptRate*rate {
			st.Pass, st.Undecided = false, true
		}
		for _, v := range verdicts {
			if !v.Pass {
				st.Failed = append(st.Failed, v.String())
			}
		}
		last = res
		if st.Pass {
			best = res
		}
		return st, nil
	}
	fm, err := s.Run(ctx, try)
	fm.MaxEvents = fm.Max * epr
	res := best
	if res == nil {
		res = last
	}
	if res == nil {
		if err == nil {
			err = errors.New("find-max: no step ran")
		}
		return nil, err
	}
	res.FindMax = fm
	return res, err
}
