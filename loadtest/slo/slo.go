// Package slo parses service-level objectives such as 'p99<50ms,loss=0,success>=99.9'
// and judges a run against them.
//
// Grammar (spaces are ignored):
//
//	objectives = clause { "," clause }
//	clause     = key op value
//	op         = "<" | "<=" | ">" | ">=" | "=" | "==" | "!="
//	key        = latency | "success" | "loss" | "loss%" | "dup" | "errors" | "rate"
//	latency    = [ "e2e." ] ( "min" | "mean" | "p50" | "p90" | "p95" | "p99" | "p99.9" | "p99.99" | "max" )
//	value      = Go duration ("50ms", "1.5s") for latency keys (a bare number means ms),
//	             otherwise a number, optionally followed by "%"
//
// Latency keys without a prefix are publish latency (intended send → target's answer);
// "e2e." keys are end-to-end latency (intended send → receipt at the receiver). success
// is the percentage of requests answered 2xx; loss the number of events acknowledged
// but never delivered and loss% their percentage of acknowledged events; dup the
// duplicates delivered; errors the failed requests; rate the achieved send rate in
// requests per second.
package slo

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Objective is one parsed clause.
type Objective struct {
	Text  string  // the clause as written, normalised (no spaces)
	Key   string  // metric name, e.g. "p99", "e2e.p99.9", "success"
	Op    string  // one of < <= > >= = !=
	Value float64 // threshold; nanoseconds for latency keys
}

// IsLatency reports whether key is a latency metric.
func IsLatency(key string) bool {
	switch strings.TrimPrefix(key, "e2e.") {
	case "min", "mean", "p50", "p90", "p95", "p99", "p99.9", "p99.99", "max":
		return true
	}
	return false
}

var plainKeys = map[string]bool{"success": true, "loss": true, "loss%": true, "dup": true, "errors": true, "rate": true}

// Parse parses objectives; an empty string yields none.
func Parse(s string) ([]Objective, error) {
	s = strings.ReplaceAll(s, " ", "")
	if s == "" {
		return nil, nil
	}
	var out []Objective
	for _, c := range strings.Split(s, ",") {
		if c == "" {
			continue
		}
		i := strings.IndexAny(c, "<>=!")
		if i <= 0 {
			return nil, fmt.Errorf("slo %q: want KEY OP VALUE, e.g. p99<50ms", c)
		}
		key, rest := c[:i], c[i:]
		var op string
		for _, cand := range []string{"<=", ">=", "==", "!=", "<", ">", "="} {
			if strings.HasPrefix(rest, cand) {
				op = cand
				break
			}
		}
		if op == "" {
			return nil, fmt.Errorf("slo %q: unknown operator", c)
		}
		val := rest[len(op):]
		if op == "==" {
			op = "="
		}
		o := Objective{Text: c, Key: key, Op: op}
		switch {
		case IsLatency(key):
			d, err := parseLatency(val)
			if err != nil {
				return nil, fmt.Errorf("slo %q: %w", c, err)
			}
			o.Value = float64(d)
		case plainKeys[key]:
			v, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
			if err != nil {
				return nil, fmt.Errorf("slo %q: bad number %q", c, val)
			}
			o.Value = v
		default:
			return nil, fmt.Errorf("slo %q: unknown key %q (latency keys p50…p99.99, max, mean, min, with optional e2e. prefix; or success, loss, loss%%, dup, errors, rate)", c, key)
		}
		out = append(out, o)
	}
	return out, nil
}

func parseLatency(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(f * float64(time.Millisecond)), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q", v)
	}
	return d, nil
}

// Metrics are a run's measured values by key; latencies in nanoseconds. A key that is
// absent (for example e2e.* on a run without a receiver) fails its objective.
type Metrics map[string]float64

// Verdict is one objective judged.
type Verdict struct {
	Objective
	Actual  float64 `json:"actual"`
	Missing bool    `json:"missing,omitempty"`
	Pass    bool    `json:"pass"`
}

// String renders "p99<50ms: 12.3ms PASS".
func (v Verdict) String() string {
	res := "FAIL"
	if v.Pass {
		res = "PASS"
	}
	if v.Missing {
		return fmt.Sprintf("%s: not measured %s", v.Text, res)
	}
	return fmt.Sprintf("%s: %s %s", v.Text, Format(v.Key, v.Actual), res)
}

// Format renders a metric's value in its unit.
func Format(key string, v float64) string {
	switch {
	case IsLatency(key):
		return time.Duration(v).Round(time.Microsecond).String()
	case key == "success" || key == "loss%":
		return strconv.FormatFloat(v, 'f', 3, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Check judges every objective; pass is true when all pass.
func Check(objs []Objective, m Metrics) (verdicts []Verdict, pass bool) {
	pass = true
	for _, o := range objs {
		v := Verdict{Objective: o}
		actual, ok := m[o.Key]
		v.Actual, v.Missing = actual, !ok
		if ok {
			switch o.Op {
			case "<":
				v.Pass = actual < o.Value
			case "<=":
				v.Pass = actual <= o.Value
			case ">":
				v.Pass = actual > o.Value
			case ">=":
				v.Pass = actual >= o.Value
			case "=":
				v.Pass = actual == o.Value
			case "!=":
				v.Pass = actual != o.Value
			}
		}
		pass = pass && v.Pass
		verdicts = append(verdicts, v)
	}
	return verdicts, pass
}
