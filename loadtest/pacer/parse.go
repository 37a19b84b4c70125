package pacer

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParsePace parses Knative's pace format "r1:s1,r2:s2,…": rate r_i events per second
// for s_i, where s_i is whole seconds ("30") or a Go duration ("30s", "1m").
func ParsePace(s string) (Steps, error) {
	var out Steps
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, d, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("pace step %q: want RATE:SECONDS", part)
		}
		rate, err := strconv.ParseFloat(r, 64)
		if err != nil || rate < 0 {
			return nil, fmt.Errorf("pace step %q: bad rate %q", part, r)
		}
		dur, err := parseSeconds(d)
		if err != nil {
			return nil, fmt.Errorf("pace step %q: %w", part, err)
		}
		out = append(out, Step{Rate: rate, Duration: dur})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pace %q: no steps", s)
	}
	return out, nil
}

// ParseRamp parses "FROM:TO:STEP_SECONDS[:COUNT]" into a LogRamp.
func ParseRamp(s string) (LogRamp, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 && len(f) != 4 {
		return LogRamp{}, fmt.Errorf("ramp %q: want FROM:TO:STEP_SECONDS[:COUNT]", s)
	}
	from, err1 := strconv.ParseFloat(f[0], 64)
	to, err2 := strconv.ParseFloat(f[1], 64)
	if err1 != nil || err2 != nil || from <= 0 || to < from {
		return LogRamp{}, fmt.Errorf("ramp %q: FROM and TO must be rates with 0 < FROM ≤ TO", s)
	}
	step, err := parseSeconds(f[2])
	if err != nil {
		return LogRamp{}, fmt.Errorf("ramp %q: %w", s, err)
	}
	r := LogRamp{From: from, To: to, StepDuration: step}
	if len(f) == 4 {
		if r.Count, err = strconv.Atoi(f[3]); err != nil || r.Count < 1 {
			return LogRamp{}, fmt.Errorf("ramp %q: bad step count %q", s, f[3])
		}
	}
	return r, nil
}

// parseSeconds accepts whole or fractional seconds ("30", "0.5") or a Go duration.
func parseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if v <= 0 {
			return 0, fmt.Errorf("duration %q must be positive", s)
		}
		return seconds(v), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return d, nil
}
