// Package pacer decides when each request of an open-model load test is due.
//
// A Pacer maps the number of hits already scheduled to the time the next one is due.
// Every Pacer in this package follows one contract, which makes the intended send time
// of any hit computable without running the test:
//
//	due(n)             = intended offset of hit n (n = 0, 1, 2, …) from the start
//	Pace(elapsed, n)   = (max(0, due(n) − elapsed), stop = hit n is past the schedule)
//
// so Due(p, n) = Pace(0, n) is the intended time of hit n. Load generators measure
// latency from start + due(n), not from when they got round to sending: a stalled
// target then shows up as latency instead of silently lowering the rate (no
// coordinated omission).
package pacer

import (
	"fmt"
	"math"
	"time"
)

// A Pacer returns how long to wait, from elapsed time since the start, before sending
// hit number hits (0-based), and stop = true when that hit is not part of the schedule.
// Implementations must be safe for concurrent use (the ones here are immutable values).
type Pacer interface {
	Pace(elapsed time.Duration, hits uint64) (wait time.Duration, stop bool)
}

// Due returns the intended offset from the start of hit n, and false when hit n is past
// the end of p's schedule. It relies on the package contract Pace(0, n) = due(n).
func Due(p Pacer, n uint64) (time.Duration, bool) {
	d, stop := p.Pace(0, n)
	return d, !stop
}

// Step is one constant-rate stretch of a schedule.
type Step struct {
	Rate     float64       // events per second; 0 makes a pause
	Duration time.Duration // how long the step lasts
}

// Stepper is implemented by pacers made of constant-rate steps, so a report can show a
// per-step table.
type Stepper interface {
	Steps() []Step
}

// wait turns an intended offset into Pace's result.
func wait(due, elapsed time.Duration) time.Duration {
	if w := due - elapsed; w > 0 {
		return w
	}
	return 0
}

// seconds converts a duration in float seconds to a time.Duration, rounding to the
// nearest nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// Constant sends Rate events per second for Duration (forever if Duration is 0).
//
//	due(n) = n / Rate                 (first hit at t = 0)
//	stop   ⇔ due(n) ≥ Duration        (so ⌈Rate·Duration⌉ hits in all)
type Constant struct {
	Rate     float64
	Duration time.Duration
}

// Constant satisfies the Pacer interface.
var _ Pacer = Constant{}

// Constant satisfies the Stepper interface.
var _ Stepper = Constant{}

// String describes the pacer, e.g. "Constant{1000/s for 30s}".
func (c Constant) String() string {
	return fmt.Sprintf("Constant{%g/s for %s}", c.Rate, c.Duration)
}

// Pace implements Pacer.
func (c Constant) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if c.Rate <= 0 {
		return 0, true
	}
	due := seconds(float64(hits) / c.Rate)
	if c.Duration > 0 && due >= c.Duration {
		return 0, true
	}
	return wait(due, elapsed), false
}

// Steps implements Stepper: one step.
func (c Constant) Steps() []Step { return []Step{{Rate: c.Rate, Duration: c.Duration}} }

// Steps sends each step in turn: Rate_i events per second for Duration_i. This is
// Knative's --pace r1:s1,r2:s2 format.
//
// With T_i the step's start (T_0 = 0, T_{i+1} = T_i + D_i) and H_i the hits scheduled
// before it (H_0 = 0, H_{i+1} = H_i + ⌈R_i·D_i⌉), hit n falls in the step i with
// H_i ≤ n < H_{i+1}, and
//
//	due(n) = T_i + (n − H_i) / R_i
//	stop   ⇔ n ≥ H_k  (k = number of steps)
//
// Steps with rate 0 send nothing and only shift later steps in time.
type Steps []Step

// Steps satisfies the Pacer interface.
var _ Pacer = Steps{}

// Steps satisfies the Stepper interface.
var _ Stepper = Steps{}

// String describes the pacer, e.g. "Steps{1000/s:30s,1200/s:30s}".
func (s Steps) String() string {
	out := "Steps{"
	for i, st := range s {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%g/s:%s", st.Rate, st.Duration)
	}
	return out + "}"
}

// Pace implements Pacer.
func (s Steps) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	var start time.Duration
	var before uint64
	for _, st := range s {
		n := stepHits(st)
		if hits < before+n {
			due := start + seconds(float64(hits-before)/st.Rate)
			return wait(due, elapsed), false
		}
		before += n
		start += st.Duration
	}
	return 0, true
}

// Steps implements Stepper.
func (s Steps) Steps() []Step { return append([]Step(nil), s...) }

// stepHits is ⌈R·D⌉, the hits a step schedules (0 for a pause).
func stepHits(st Step) uint64 {
	if st.Rate <= 0 || st.Duration <= 0 {
		return 0
	}
	return uint64(math.Ceil(st.Rate*st.Duration.Seconds() - 1e-9))
}

// LogRamp climbs from From to To events per second in Count steps of StepDuration
// each, with rates spaced evenly on a log scale (the ramp script's rising rates):
//
//	R_i = From · (To/From)^(i/(Count−1)),  i = 0 … Count−1   (R_0 = From, R_{Count−1} = To)
//
// and then schedules hits exactly like Steps with those rates: due(n) = T_i + (n − H_i)/R_i.
// With Count = 0 the count is chosen as 1 + ⌈10·log10(To/From)⌉ (about ten steps per
// decade, each ≈ 26% above the last).
type LogRamp struct {
	From, To     float64
	StepDuration time.Duration
	Count        int
}

// LogRamp satisfies the Pacer interface.
var _ Pacer = LogRamp{}

// LogRamp satisfies the Stepper interface.
var _ Stepper = LogRamp{}

// String describes the pacer, e.g. "LogRamp{1000→20000/s, 14 steps of 5s}".
func (r LogRamp) String() string {
	return fmt.Sprintf("LogRamp{%g→%g/s, %d steps of %s}", r.From, r.To, r.count(), r.StepDuration)
}

func (r LogRamp) count() int {
	if r.Count > 0 {
		return r.Count
	}
	if r.From <= 0 || r.To <= r.From {
		return 1
	}
	return 1 + int(math.Ceil(10*math.Log10(r.To/r.From)-1e-9))
}

// Steps implements Stepper: the log-spaced rates, rounded to whole events per second.
func (r LogRamp) Steps() []Step {
	out := make([]Step, r.count())
	for i := range out {
		out[i] = Step{Rate: r.rate(i), Duration: r.StepDuration}
	}
	return out
}

// rate is R_i rounded to a whole number of events per second.
func (r LogRamp) rate(i int) float64 {
	k := r.count()
	if k <= 1 {
		return math.Round(r.From)
	}
	return math.Round(r.From * math.Pow(r.To/r.From, float64(i)/float64(k-1)))
}

// Pace implements Pacer.
func (r LogRamp) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if r.From <= 0 || r.To <= 0 || r.StepDuration <= 0 {
		return 0, true
	}
	var start time.Duration
	var before uint64
	for i, k := 0, r.count(); i < k; i++ {
		st := Step{Rate: r.rate(i), Duration: r.StepDuration}
		n := stepHits(st)
		if hits < before+n {
			return wait(start+seconds(float64(hits-before)/st.Rate), elapsed), false
		}
		before += n
		start += st.Duration
	}
	return 0, true
}

// Warmup runs Rate events per second for Duration before handing over to Next, whose
// hit numbers and times are shifted past the warm-up. With W = ⌈Rate·Duration⌉:
//
//	due(n) = n / Rate                       for n < W
//	due(n) = Duration + due_Next(n − W)     for n ≥ W
//
// Load generators send warm-up hits but leave them out of the results.
type Warmup struct {
	Rate     float64
	Duration time.Duration
	Next     Pacer
}

// Warmup satisfies the Pacer interface.
var _ Pacer = Warmup{}

// String describes the pacer, e.g. "Warmup{1000/s for 10s}+Steps{…}".
func (w Warmup) String() string {
	return fmt.Sprintf("Warmup{%g/s for %s}+%v", w.Rate, w.Duration, w.Next)
}

// Hits returns W, the number of warm-up hits.
func (w Warmup) Hits() uint64 { return stepHits(Step{Rate: w.Rate, Duration: w.Duration}) }

// Pace implements Pacer.
func (w Warmup) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if W := w.Hits(); hits >= W {
		d, stop := w.Next.Pace(0, hits-W)
		if stop {
			return 0, true
		}
		return wait(w.Duration+d, elapsed), false
	}
	return wait(seconds(float64(hits)/w.Rate), elapsed), false
}

// HitsBefore returns how many hits p schedules strictly before offset t: the smallest n
// with due(n) ≥ t or past the schedule's end. It searches with O(log n) calls to Pace,
// relying on due being non-decreasing in n.
func HitsBefore(p Pacer, t time.Duration) uint64 {
	before := func(n uint64) bool { d, ok := Due(p, n); return ok && d < t }
	if !before(0) {
		return 0
	}
	hi := uint64(1)
	for before(hi) {
		if hi > 1<<60 {
			return hi
		}
		hi *= 2
	}
	lo := hi / 2 // before(lo) is true, before(hi) false
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if before(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
