// Package report renders load kit results: vegeta-style text, JSON, a per-second CSV,
// PNG plots and one self-contained HTML page, and a side-by-side comparison of two runs.
package report

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// round shortens a duration for display the way vegeta does (µs precision below 1 s).
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

func durs(ds ...time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = round(d).String()
	}
	return strings.Join(s, ", ")
}

// WriteLoad writes r in vegeta's text report layout, plus the HDR tail percentiles,
// the generator's own verdict, and a per-step table for pace and ramp runs.
func WriteLoad(w io.Writer, r *load.Result) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.StripEscape)
	l := r.Latency
	var meanIn, meanOut float64
	if r.Requests > 0 {
		meanIn = float64(r.BytesIn) / float64(r.Requests)
		meanOut = float64(r.BytesOut) / float64(r.Requests)
	}
	fmt.Fprintf(tw, "Requests\t[total, rate, throughput]\t%d, %.2f, %.2f\n", r.Requests, r.Rate, r.Throughput)
	fmt.Fprintf(tw, "Duration\t[total, attack, wait]\t%s\n", durs(r.Duration, r.Attack, r.Wait))
	fmt.Fprintf(tw, "Latencies\t[min, mean, 50, 90, 95, 99, max]\t%s\n", durs(l.Min, l.Mean, l.P50, l.P90, l.P95, l.P99, l.Max))
	fmt.Fprintf(tw, "Latencies HDR\t[99.9, 99.99]\t%s\n", durs(l.P999, l.P9999))
	fmt.Fprintf(tw, "Bytes In\t[total, mean]\t%d, %.2f\n", r.BytesIn, meanIn)
	fmt.Fprintf(tw, "Bytes Out\t[total, mean]\t%d, %.2f\n", r.BytesOut, meanOut)
	fmt.Fprintf(tw, "Success\t[ratio]\t%.2f%%\n", 100*r.Success)
	fmt.Fprintf(tw, "Status Codes\t[code:count]\t%s\n", codes(r.StatusCodes))
	fmt.Fprintf(tw, "Generator\t[intended, achieved, late, all busy, lag p99]\t%.2f/s, %.2f/s, %d, %d, %s\n", r.IntendedRate, r.Rate, r.Late, r.Busy, durs(r.Lag.P99))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: write: %w", err)
	}
	fmt.Fprintln(w, "Error Set:")
	for _, e := range sortedKeys(r.Errors) {
		fmt.Fprintf(w, "%s (×%d)\n", e, r.Errors[e])
	}
	if r.Saturated {
		fmt.Fprintf(w, "WARNING: the generator could not keep the schedule (achieved %.2f of %.2f requests/s; %d requests found all %d connections busy; p99 dispatch lag %s): "+
			"raise --connections or give it more CPU. Latencies still count from the intended send times.\n",
			r.Rate, r.IntendedRate, r.Busy, r.Connections, round(r.Lag.P99))
	}
	if len(r.Steps) > 1 {
		fmt.Fprintln(w)
		if err := WriteSteps(w, r.Steps); err != nil {
			return err
		}
	}
	return nil
}

// WriteSteps writes the per-step table.
func WriteSteps(w io.Writer, steps []load.StepResult) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tintended/s\tachieved/s\tduration\trequests\tsuccess\tp50\tp90\tp99\tp99.9\tmax\t")
	for _, s := range steps {
		l := s.Latency
		fmt.Fprintf(tw, "%d\t%.0f\t%.1f\t%s\t%d\t%.2f%%\t%s\t%s\t%s\t%s\t%s\t\n", s.Step, s.IntendedRate, s.Rate, s.Duration,
			s.Requests, 100*s.Success, round(l.P50), round(l.P90), round(l.P99), round(l.P999), round(l.Max))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: write steps: %w", err)
	}
	return nil
}

func codes(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _ := strconv.Atoi(keys[i])
		b, _ := strconv.Atoi(keys[j])
		return a < b
	})
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(s, "  ")
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// WriteReceive writes a receiver's report.
func WriteReceive(w io.Writer, r *receive.Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	l := r.Latency
	fmt.Fprintf(tw, "Events\t[received, rate, warm-up]\t%d, %.2f/s, %d\n", r.Events, r.Rate, r.Warmup)
	fmt.Fprintf(tw, "Accounting\t[lost (gaps), duplicates, invalid, rejected]\t%d, %d, %d, %d\n", r.Lost, r.Duplicates, r.Invalid, r.Rejected)
	fmt.Fprintf(tw, "E2E Latencies\t[min, mean, 50, 90, 95, 99, max]\t%s\n", durs(l.Min, l.Mean, l.P50, l.P90, l.P95, l.P99, l.Max))
	fmt.Fprintf(tw, "E2E HDR\t[99.9, 99.99]\t%s\n", durs(l.P999, l.P9999))
	fmt.Fprintf(tw, "Peak second\t[events]\t%d\n", peak(r.Seconds))
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "Run %s\t[received, highest seq, lost, duplicates]\t%d, %d, %d, %d\n", run.Run, run.Received, run.HighestSeq, run.Lost, run.Duplicates)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("report: write: %w", err)
	}
	return nil
}

func peak(s []stats.RecvSecond) uint64 {
	var m uint64
	for _, x := range s {
		m = max(m, x.Events)
	}
	return m
}
