package main

import (
	"fmt"
	"strings"
)

// Verdict states.
const (
	met    = "met"
	notMet = "NOT MET"
	notRun = "not run"
)

// verdict is one target of the Performance issue, judged on one run.
type verdict struct {
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Ratio    float64 `json:"ratio,omitempty"` // measured / required, where a ratio makes sense
	Status   string  `json:"status"`          // met, NOT MET, not run
	Why      string  `json:"why,omitempty"`   // for not run
}

const mib = 1 << 20

// verdicts judges every target on r.
func verdicts(r *results) []verdict {
	var out []verdict
	add := func(v verdict) { out = append(out, v) }
	direct, mem, fan, filt := r.find(scDirect), r.find(scMemory), r.find(scFanout), r.find(scFilter)

	// 1. memory broker sustained ≥ 0.6 × direct
	v := verdict{Target: "memory broker, 1 trigger: sustained rate ≥ 0.6 × direct"}
	if why := either(missing(direct), ran(mem)); why != "" {
		v.Status, v.Why = notRun, why
	} else {
		ratio := mem.SustainedRate() / direct.SustainedRate()
		v.Measured = fmt.Sprintf("%.0f / %.0f ev/s = %.2f × direct", mem.SustainedRate(), direct.SustainedRate(), ratio)
		v.Ratio, v.Status = ratio, status(ratio >= 0.6)
	}
	add(v)

	// 1b. the absolute figure the issue expects on 2 cores
	v = verdict{Target: "memory broker, 1 trigger: ≥ 6,000 ev/s on this machine (absolute)"}
	if why := ran(mem); why != "" {
		v.Status, v.Why = notRun, why
	} else {
		v.Measured = fmt.Sprintf("%.0f ev/s", mem.SustainedRate())
		v.Ratio, v.Status = mem.SustainedRate()/6000, status(mem.SustainedRate() >= 6000)
	}
	add(v)

	// 2. p99 e2e at half ≤ 5 ms (memory)
	add(halfP99(mem, "memory broker: e2e p99 at 50% of sustained ≤ 5 ms", 5))

	// 3. fan-out deliveries per core ≥ 0.5 × single
	v = verdict{Target: "fan-out to 10 triggers: deliveries/s per core ≥ 0.5 × single trigger's"}
	if why := either(missing(mem), ran(fan)); why != "" {
		v.Status, v.Why = notRun, why
	} else if a, b := perCore(fan), mem.sustainedStep().DeliveriesPerCPUSecond; b <= 0 {
		v.Status, v.Why = notRun, "no broker CPU measured"
	} else {
		ratio := a / b
		v.Measured = fmt.Sprintf("%.0f vs %.0f deliveries per CPU-second = %.2f×", a, b, ratio)
		v.Ratio, v.Status = ratio, status(ratio >= 0.5)
	}
	add(v)

	// 4. 100 non-matching triggers cost ≤ 10%
	v = verdict{Target: "100 triggers, 1 matching: sustained ≥ 0.9 × 1 trigger (≤ 10% cost)"}
	if why := either(missing(mem), ran(filt)); why != "" {
		v.Status, v.Why = notRun, why
	} else {
		ratio := filt.SustainedRate() / mem.SustainedRate()
		v.Measured = fmt.Sprintf("%.0f / %.0f ev/s = %.2f× (cost %.0f%%)", filt.SustainedRate(), mem.SustainedRate(), ratio, 100*(1-ratio))
		v.Ratio, v.Status = ratio, status(ratio >= 0.9)
	}
	add(v)

	// 5. overload, per channel and factor
	if len(r.Overloads) == 0 {
		out = append(out, overloadVerdicts(nil)...)
	}
	for _, o := range r.Overloads {
		out = append(out, overloadVerdicts(o)...)
	}

	// 5a. batched delivery
	out = append(out, batchVerdicts(r.Batch)...)

	// 5b. CPU per event against the nginx floor
	out = append(out, floorVerdicts(r.Floor)...)

	// 6. durable
	for _, d := range []struct {
		name string
		min  float64
	}{{scJetStream, 0.5}, {scKafka, 0.4}} {
		s := r.find(d.name)
		v = verdict{Target: fmt.Sprintf("%s: sustained ≥ %.0f%% of the memory channel, zero loss", d.name, 100*d.min)}
		if why := either(missing(mem), ran(s)); why != "" {
			v.Status, v.Why = notRun, why
		} else {
			ratio := s.SustainedRate() / mem.SustainedRate()
			v.Measured = fmt.Sprintf("%.0f / %.0f ev/s = %.2f×", s.SustainedRate(), mem.SustainedRate(), ratio)
			v.Ratio, v.Status = ratio/d.min, status(ratio >= d.min)
		}
		add(v)
		add(halfP99(s, d.name+": e2e p99 at 50% of sustained < 50 ms", 50))
	}
	return out
}

// halfP99 judges a scenario's end-to-end p99 at half its sustained rate against limitMS.
func halfP99(s *scenarioResult, target string, limitMS float64) verdict {
	v := verdict{Target: target}
	if why := ran(s); why != "" {
		v.Status, v.Why = notRun, why
		return v
	}
	if s.Half == nil {
		v.Status, v.Measured = notMet, "no latency run: no sustained rate"
		return v
	}
	p99 := s.Half.E2E.P99
	v.Measured = fmt.Sprintf("%.2f ms at %.0f ev/s (p99.9 %.2f ms)", p99, s.Half.IntendedRate, s.Half.E2E.P999)
	if s.Half.Lost > 0 {
		v.Measured += fmt.Sprintf(", %d lost", s.Half.Lost)
	}
	v.Ratio = p99 / limitMS
	v.Status = status(p99 <= limitMS && s.Half.Lost == 0)
	return v
}

// overloadVerdicts judges the overload targets of one overload run (o nil: none ran).
func overloadVerdicts(o *overloadResult) []verdict {
	prefix := "overload: "
	if o != nil && o.Channel != "" {
		prefix = fmt.Sprintf("overload %s %.0f× (%d conns): ", o.Channel, o.Factor, o.Connections)
	}
	targets := []string{
		prefix + "peak RSS ≤ 200 MiB",
		prefix + "every answer 202, 429 or 503 with Retry-After; 429 p99 ≤ 1 s",
		prefix + "delivery rate ≥ 90% of the sustained rate's (median of reference/overload pairs)",
		prefix + "zero accepted events lost, no crash",
		prefix + "/healthz, /readyz, /metrics answer in < 100 ms",
	}
	why := ""
	switch {
	case o == nil:
		why = "not selected"
	case o.NotRun != "":
		why = o.NotRun
	case o.Error != "":
		why = "error: " + o.Error
	}
	if why != "" {
		out := make([]verdict, len(targets))
		for i, t := range targets {
			out[i] = verdict{Target: t, Status: notRun, Why: why}
		}
		return out
	}
	rss := float64(o.PeakRSS) / mib
	rejOK := o.Probe429RetryAfter == o.Probe429 && o.ProbeRejectP99MS <= 1000 && o.OtherFailures == 0
	rejMeasured := fmt.Sprintf("%d × 429, %d × 503, %d other of %d requests; probe: %d/%d 429s with Retry-After, p99 %.2f ms (max %.1f)",
		o.Rejected429, o.Rejected503, o.OtherFailures, o.Requests, o.Probe429RetryAfter, o.Probe429, o.ProbeRejectP99MS, o.ProbeRejectMaxMS)
	delivery := verdict{Target: targets[2], Measured: fmt.Sprintf("median %.2f× of %d pairs (overload / reference ev/s: %s; lowest overload second %.0f)%s",
		o.Goodput, len(o.Pairs), pairsText(o.Pairs), o.MinDeliveryRate, sustainedNote(o)),
		Ratio: o.Goodput, Status: status(o.Goodput >= 0.9)}
	if o.Rejected429+o.Rejected503 == 0 && o.Achieved >= 0.9*o.Rate {
		// Everything was accepted at the rate offered: the broker took the "overload",
		// so the ramp's sustained rate was below what it takes and the run proves
		// nothing. (Nothing refused but the generator held back is an overload: the
		// broker pushed back by making requests wait for room.)
		delivery.Status = notMet
		delivery.Measured += "; not an overload: nothing was refused or held back (the sustained rate was an underestimate)"
	}
	var capLost uint64
	capNote := ""
	if c := o.Capacity; c != nil && c.Error == "" {
		capLost = c.Lost
		capNote = fmt.Sprintf("; capacity step: %d lost of %d accepted", c.Lost, c.Accepted)
		if !c.Settled {
			capNote += ", not all delivered"
		}
	}
	refLost, refAccepted, refSettled := uint64(0), uint64(0), true
	for _, p := range o.Pairs {
		if r := p.Reference; r != nil && r.Error == "" {
			refLost, refAccepted, refSettled = refLost+r.Lost, refAccepted+r.Accepted, refSettled && r.Settled
		}
	}
	if len(o.Pairs) > 0 {
		capNote += fmt.Sprintf("; reference phases: %d lost of %d accepted", refLost, refAccepted)
		if !refSettled {
			capNote += ", not all delivered"
		}
	}
	return []verdict{
		{Target: targets[0], Measured: fmt.Sprintf("%.1f MiB", rss), Ratio: rss / 200, Status: status(rss <= 200)},
		{Target: targets[1], Measured: rejMeasured, Ratio: o.ProbeRejectP99MS / 1000, Status: status(rejOK)},
		delivery,
		{Target: targets[3], Measured: fmt.Sprintf("%d lost of %d accepted, broker alive: %v%s", o.Lost, o.Accepted, o.Alive, capNote),
			Status: status(o.Lost == 0 && o.Settled && o.Alive && capLost == 0 && refLost == 0 && refSettled &&
				(o.Capacity == nil || o.Capacity.Error != "" || o.Capacity.Settled))},
		{Target: targets[4], Measured: healthMeasured(o),
			Ratio: o.HealthMaxMS / 100, Status: status(o.HealthMaxMS < 100 && o.HealthFailures == 0)},
	}
}

// pairsText lists the pairs as "overload/reference" delivery rates, a failed reference
// phase as "overload/failed".
func pairsText(pairs []overloadPair) string {
	if len(pairs) == 0 {
		return "none ran"
	}
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		ref := "failed"
		if p.Reference != nil && p.Reference.Error == "" {
			ref = fmt.Sprintf("%.0f", p.Reference.Delivery)
		}
		parts[i] = fmt.Sprintf("%.0f/%s", p.Delivery, ref)
	}
	return strings.Join(parts, ", ")
}

// sustainedNote says where an overload run's sustained rate came from.
func sustainedNote(o *overloadResult) string {
	switch {
	case o.Capacity == nil:
		return ""
	case o.Capacity.Error != "":
		return fmt.Sprintf("; sustained: the ramp's (capacity step failed: %s)", o.Capacity.Error)
	case o.SustainedFrom == "capacity":
		return fmt.Sprintf("; sustained: the measured capacity (the ramp's was %.0f)", o.RampSustainedRate)
	}
	return fmt.Sprintf("; sustained: the ramp's (measured capacity %.0f)", o.Capacity.Delivery)
}

// batchVerdicts judges the batch scenario: no event lost at any N (every N measured),
// and batching paying for itself: broker CPU per delivered event at N > 1 below N = 1's.
func batchVerdicts(b *batchResult) []verdict {
	lossT := "batch: zero loss at N = " + joinInts(batchSizes)
	cpuT := "batch: broker CPU per delivered event at every N > 1 < N = 1's"
	notRunAll := func(why string) []verdict {
		return []verdict{{Target: lossT, Status: notRun, Why: why}, {Target: cpuT, Status: notRun, Why: why}}
	}
	if b == nil {
		return notRunAll("not selected")
	}
	byN := map[int]*batchRow{}
	for i := range b.Rows {
		byN[b.Rows[i].N] = &b.Rows[i]
	}
	var missing []string
	for _, n := range batchSizes {
		r := byN[n]
		switch {
		case r == nil:
			missing = append(missing, fmt.Sprintf("N=%d not run", n))
		case r.NotRun != "":
			missing = append(missing, fmt.Sprintf("N=%d not run: %s", n, r.NotRun))
		case r.Step.Requests == 0:
			missing = append(missing, fmt.Sprintf("N=%d failed: %s", n, r.Error))
		}
	}
	if len(missing) > 0 {
		return notRunAll(strings.Join(missing, "; "))
	}
	loss := verdict{Target: lossT, Status: met}
	var parts []string
	for _, n := range batchSizes {
		r := byN[n]
		var accepted uint64
		for _, st := range r.Ramp {
			accepted += st.Accepted
		}
		if len(r.Ramp) == 0 {
			accepted = r.Step.Accepted
		}
		parts = append(parts, fmt.Sprintf("N=%d: %d lost of %d accepted", n, r.lost(), accepted))
		if r.lost() > 0 || r.Step.Accepted == 0 || r.Error != "" {
			loss.Status = notMet
		}
		if r.Error != "" {
			parts[len(parts)-1] += " (error: " + r.Error + ")"
		}
	}
	loss.Measured = strings.Join(parts, "; ")

	cpu := verdict{Target: cpuT, Status: met}
	base := byN[batchSizes[0]].CPUPerDeliveredUS
	parts = []string{fmt.Sprintf("N=%d: %.1f µs", batchSizes[0], base)}
	for _, n := range batchSizes[1:] {
		c := byN[n].CPUPerDeliveredUS
		parts = append(parts, fmt.Sprintf("N=%d: %.1f µs", n, c))
		if base > 0 {
			cpu.Ratio = max(cpu.Ratio, c/base)
		}
		if base <= 0 || c <= 0 || c >= base {
			cpu.Status = notMet
		}
	}
	cpu.Measured = strings.Join(parts, ", ") + fmt.Sprintf(" at %.0f ev/s", b.Rate)
	return []verdict{loss, cpu}
}

// joinInts renders 1, 10, 100.
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// floorVerdicts judges Sluice's CPU per event against nginx's, one verdict per row.
func floorVerdicts(f *floorResult) []verdict {
	const target = "CPU per event ≤ 1.5 × nginx proxy_pass"
	switch {
	case f == nil:
		return []verdict{{Target: "floor: " + target, Status: notRun, Why: "not selected"}}
	case f.NotRun != "":
		return []verdict{{Target: "floor: " + target, Status: notRun, Why: f.NotRun}}
	case len(f.Rows) == 0:
		return []verdict{{Target: "floor: " + target, Status: notRun, Why: "error: " + f.Error}}
	}
	var out []verdict
	for _, r := range f.Rows {
		out = append(out, verdict{
			Target:   fmt.Sprintf("floor %s, %.0f ev/s: %s", r.Layout, r.Rate, target),
			Measured: fmt.Sprintf("Sluice %.1f µs/ev, nginx %.1f µs/ev = %.2f×", r.SluiceCPUUS, r.NginxCPUUS, r.Ratio),
			Ratio:    r.Ratio / 1.5, Status: status(r.Ratio > 0 && r.Ratio <= 1.5),
		})
	}
	return out
}

// ran says why scenario s has no measurements to judge ("" if it has): it was not
// selected, not run, or failed before measuring. A scenario that ran but sustained no
// step is judged (rate 0), not excused.
func ran(s *scenarioResult) string {
	switch {
	case s == nil:
		return "scenario not selected"
	case s.NotRun != "":
		return s.Name + " not run: " + s.NotRun
	case s.Error != "" && len(s.Steps) == 0:
		return s.Name + " failed: " + s.Error
	}
	return ""
}

// missing is ran for a reference scenario, which must also have a sustained step for
// a ratio against it to mean anything.
func missing(ref *scenarioResult) string {
	if why := ran(ref); why != "" {
		return why
	}
	if ref.sustainedStep() == nil {
		return ref.Name + " sustained no step"
	}
	return ""
}

// perCore is the sustained step's deliveries per CPU-second, 0 without one.
func perCore(s *scenarioResult) float64 {
	if st := s.sustainedStep(); st != nil {
		return st.DeliveriesPerCPUSecond
	}
	return 0
}

func status(ok bool) string {
	if ok {
		return met
	}
	return notMet
}

// either returns a unless it is empty, else b.
func either(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// healthMeasured describes the health probes of an overload: the slowest answer, with
// its path and when it came when known, how many of the answers took 100 ms or more,
// and the failures.
func healthMeasured(o *overloadResult) string {
	s := fmt.Sprintf("slowest %.1f ms", o.HealthMaxMS)
	if o.HealthSlowestPath != "" {
		s += fmt.Sprintf(" (%s asked at %.1f s)", o.HealthSlowestPath, o.HealthSlowestAtS)
	}
	if o.HealthAnswers > 0 {
		s += fmt.Sprintf(", %d of %d answers ≥ 100 ms", o.HealthOver100, o.HealthAnswers)
	}
	return s + fmt.Sprintf(", %d failures", o.HealthFailures)
}
