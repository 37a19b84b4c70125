package bench

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/slo"
)

// kneeTarget is a fake target: a rate passes when it is at most knee, and the generator
// falls short of any rate above saturate (0: never), sending saturate requests/s.
func kneeTarget(knee, saturate float64, tried *[]float64) Trial {
	return func(_ context.Context, n int, rate float64) (SearchStep, error) {
		*tried = append(*tried, rate)
		st := SearchStep{Step: n, Rate: rate, Events: rate, Achieved: rate, Pass: rate <= knee}
		if saturate > 0 && rate > saturate {
			st.Achieved = saturate
			st.Pass, st.Undecided = false, saturate <= knee
		}
		if !st.Pass {
			st.Failed = []string{"success>=99: 50.000% FAIL"}
		}
		return st, nil
	}
}

func TestSearchFindsTheKneeWithinPrecisionAndBudget(t *testing.T) {
	objs, err := slo.Parse("success>=99,loss=0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                string
		knee, start, prec   float64
		budget              int
		saturate            float64
		wantConverged       bool
		wantMax, wantCeil   float64 // checked when ≥ 0
		wantStoppedContains string
	}{
		{name: "knee above start", knee: 2000, start: 500, prec: 0.10, budget: 20, wantConverged: true, wantMax: -1, wantCeil: -1},
		{name: "knee far above start", knee: 123456, start: 100, prec: 0.05, budget: 30, wantConverged: true, wantMax: -1, wantCeil: -1},
		{name: "knee at start", knee: 1000, start: 1000, prec: 0.05, budget: 20, wantConverged: true, wantMax: -1, wantCeil: -1},
		{name: "knee below start", knee: 37, start: 1000, prec: 0.05, budget: 20, wantConverged: true, wantMax: -1, wantCeil: -1},
		{name: "fine precision stops at adjacent integers", knee: 15.5, start: 10, prec: 0.001, budget: 20, wantConverged: true, wantMax: 15, wantCeil: 16},
		{name: "coarse precision", knee: 3000, start: 1000, prec: 1, budget: 20, wantConverged: true, wantMax: 2000, wantCeil: 4000},
		{name: "nothing passes", knee: 0.5, start: 8, prec: 0.05, budget: 20, wantMax: 0, wantCeil: 1, wantStoppedContains: "every rate failed"},
		{name: "nothing fails: budget", knee: math.Inf(1), start: 100, prec: 0.05, budget: 5, wantMax: 1600, wantCeil: 0, wantStoppedContains: "--max-steps 5"},
		{name: "budget spent while bisecting", knee: 2000, start: 500, prec: 0.001, budget: 6, wantMax: -1, wantCeil: -1, wantStoppedContains: "--max-steps 6"},
		{name: "budget of one", knee: 2000, start: 500, prec: 0.05, budget: 1, wantMax: 500, wantCeil: 0, wantStoppedContains: "--max-steps 1"},
		{name: "generator falls short of a rate the target holds", knee: 1e6, start: 1000, prec: 0.05, budget: 20, saturate: 5000, wantMax: 4000, wantCeil: 0, wantStoppedContains: "could not send 8000"},
		{name: "generator falls short of a rate the target fails", knee: 3000, start: 1000, prec: 0.05, budget: 20, saturate: 3500, wantConverged: true, wantMax: -1, wantCeil: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []float64
			var seen []SearchStep
			s := Search{Objectives: objs, Start: tc.start, Precision: tc.prec, MaxSteps: tc.budget,
				StepDuration: time.Second, OnStep: func(st SearchStep) { seen = append(seen, st) }}
			fm, err := s.Run(context.Background(), kneeTarget(tc.knee, tc.saturate, &tried))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("tried %v: max %g, ceiling %g, %s", tried, fm.Max, fm.Ceiling, fm.Stopped)
			if len(fm.Steps) > tc.budget || len(tried) > tc.budget {
				t.Errorf("%d steps, budget %d", len(fm.Steps), tc.budget)
			}
			if len(seen) != len(fm.Steps) {
				t.Errorf("OnStep called %d times for %d steps", len(seen), len(fm.Steps))
			}
			if fm.Converged != tc.wantConverged {
				t.Errorf("converged %v, want %v (%s)", fm.Converged, tc.wantConverged, fm.Stopped)
			}
			if !strings.Contains(fm.Stopped, tc.wantStoppedContains) {
				t.Errorf("stopped %q, want it to say %q", fm.Stopped, tc.wantStoppedContains)
			}
			// Whatever stopped it, the bracket is honest: Max passed, Ceiling failed.
			if fm.Max > tc.knee || (fm.Ceiling > 0 && fm.Ceiling <= tc.knee) {
				t.Errorf("max %g, ceiling %g do not bracket the knee %g", fm.Max, fm.Ceiling, tc.knee)
			}
			if tc.wantMax >= 0 && fm.Max != tc.wantMax {
				t.Errorf("max %g, want %g", fm.Max, tc.wantMax)
			}
			if tc.wantCeil >= 0 && fm.Ceiling != tc.wantCeil {
				t.Errorf("ceiling %g, want %g", fm.Ceiling, tc.wantCeil)
			}
			for i, r := range tried {
				for _, q := range tried[:i] {
					if q == r {
						t.Errorf("rate %g tried twice", r)
					}
				}
			}
			if !fm.Converged {
				return
			}
			if fm.Ceiling-fm.Max > tc.prec*fm.Max && fm.Ceiling-fm.Max > 1 {
				t.Errorf("max %g, ceiling %g: wider than the precision %g", fm.Max, fm.Ceiling, tc.prec)
			}
			// Ramp: one step per doubling (or halving) between start and knee, plus
			// the one that crosses it; bisect: one step per halving of the bracket
			// down to the precision, plus one for rounding.
			bound := int(math.Ceil(math.Abs(math.Log2(tc.knee/tc.start)))) + 2 +
				int(math.Ceil(math.Log2(1/tc.prec))) + 1
			if len(fm.Steps) > bound {
				t.Errorf("%d steps, more than ramp + bisect need (%d)", len(fm.Steps), bound)
			}
		})
	}
}

func TestSearchStopsOnAnErrorOrCancellation(t *testing.T) {
	objs, _ := slo.Parse("loss=0")
	s := Search{Objectives: objs, Start: 100, Precision: 0.05, MaxSteps: 20, StepDuration: time.Second}
	boom := errors.New("boom")
	fm, err := s.Run(context.Background(), func(_ context.Context, n int, rate float64) (SearchStep, error) {
		if n == 3 {
			return SearchStep{}, boom
		}
		return SearchStep{Step: n, Rate: rate, Pass: true}, nil
	})
	if !errors.Is(err, boom) || len(fm.Steps) != 2 || fm.Max != 200 {
		t.Errorf("error %v, %d steps, max %g; want boom after 2 steps, max 200", err, len(fm.Steps), fm.Max)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fm, err = s.Run(ctx, func(_ context.Context, n int, rate float64) (SearchStep, error) {
		cancel()
		return SearchStep{Step: n, Rate: rate, Pass: true}, nil
	})
	if !errors.Is(err, context.Canceled) || len(fm.Steps) != 1 || fm.Stopped != "interrupted" {
		t.Errorf("error %v, %d steps, stopped %q; want cancelled after 1 step", err, len(fm.Steps), fm.Stopped)
	}
}

func TestSearchValidatesItsFlags(t *testing.T) {
	objs, _ := slo.Parse("loss=0")
	ok := Search{Objectives: objs, Start: 100, Precision: 0.05, MaxSteps: 20, StepDuration: time.Second}
	for _, tc := range []struct {
		name string
		edit func(*Search)
		want string
	}{
		{"no objectives", func(s *Search) { s.Objectives = nil }, "--slo"},
		{"start 0", func(s *Search) { s.Start = 0 }, "--start-rate"},
		{"start NaN", func(s *Search) { s.Start = math.NaN() }, "--start-rate"},
		{"precision 0", func(s *Search) { s.Precision = 0 }, "--precision"},
		{"precision above 100%", func(s *Search) { s.Precision = 1.5 }, "--precision"},
		{"no steps", func(s *Search) { s.MaxSteps = 0 }, "--max-steps"},
		{"no duration", func(s *Search) { s.StepDuration = 0 }, "--duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			_, err := FindMax(context.Background(), Options{}, s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	if err := ok.validate(); err != nil {
		t.Errorf("valid search: %v", err)
	}
}
