package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The marker comments around the performance table in the repository's README.md: the
// suite replaces what lies between them and leaves the rest of the file as it is.
const (
	tableBegin = "<!-- bench-table:begin -->"
	tableEnd   = "<!-- bench-table:end -->"
)

// defaultOut is --out's default; --readme defaults to README.md only with it.
const defaultOut = "docs/benchmarks"

// readmeTarget is the file whose table the run rewrites ("" for none): readme when the
// --readme flag was given (set), else README.md when out is the default output
// directory, else none (a run into another directory is not the benchmark of record).
func readmeTarget(out, readme string, set bool) string {
	if set {
		return readme
	}
	if filepath.Clean(out) == defaultOut {
		return "README.md"
	}
	return ""
}

// checkReadmeTable reports whether name has the table's markers, before a run spends
// its minutes.
func checkReadmeTable(name string) error {
	doc, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("--readme: %w", err)
	}
	if _, err := spliceTable(string(doc), ""); err != nil {
		return fmt.Errorf("--readme %s: %w", name, err)
	}
	return nil
}

// writeReadmeTable rewrites the performance table between the markers of name from r;
// benchREADME is the suite's full README, which the table links to. A --quick run
// leaves the table alone (its numbers are not the benchmark) and says so in skipped.
func writeReadmeTable(name, benchREADME string, r *results) (skipped string, err error) {
	if r.Quick {
		return name + ": table left alone (a --quick run's numbers are not the benchmark)", nil
	}
	doc, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("--readme: %w", err)
	}
	link, err := relLink(name, benchREADME)
	if err != nil {
		return "", fmt.Errorf("--readme %s: %w", name, err)
	}
	out, err := spliceTable(string(doc), readmeTable(r, filepath.ToSlash(link)))
	if err != nil {
		return "", fmt.Errorf("--readme %s: %w", name, err)
	}
	if err := os.WriteFile(name, []byte(out), 0o644); err != nil {
		return "", fmt.Errorf("--readme: %w", err)
	}
	return "", nil
}

// relLink is the path of target relative to from's directory, both made absolute.
func relLink(from, target string) (string, error) {
	a, err := filepath.Abs(from)
	if err != nil {
		return "", err
	}
	b, err := filepath.Abs(target)
	if err != nil {
		return "", err
	}
	return filepath.Rel(filepath.Dir(a), b)
}

// spliceTable returns doc with the text between its markers replaced by table; each
// marker must appear once, begin before end.
func spliceTable(doc, table string) (string, error) {
	for _, m := range []string{tableBegin, tableEnd} {
		switch strings.Count(doc, m) {
		case 0:
			return "", fmt.Errorf("no %s marker", m)
		case 1:
		default:
			return "", fmt.Errorf("marker %s appears %d times, want once", m, strings.Count(doc, m))
		}
	}
	i, j := strings.Index(doc, tableBegin)+len(tableBegin), strings.Index(doc, tableEnd)
	if j < i {
		return "", fmt.Errorf("marker %s comes before %s", tableEnd, tableBegin)
	}
	return doc[:i] + "\n" + table + doc[j:], nil
}

// readmeTable renders the README's performance table from r, with the line naming the
// run under it; link is the suite's full README relative to the table's file.
func readmeTable(r *results, link string) string {
	mem, js, kafka := r.find(scMemory), r.find(scJetStream), r.find(scKafka)
	var b strings.Builder
	b.WriteString("| | Sluice | reference reports |\n| --- | --- | --- |\n")
	row := func(what, sluice, ref string) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", what, cellText(sluice), ref)
	}
	row("memory broker, 1 trigger, sustained with zero loss", rateCell(mem),
		"Knative IMC dispatcher 2,000/s (4 vCPU); MT broker ~12,000/s on 25 pods")
	row("end-to-end p99 at half that rate", halfCell(mem), "Knative broker p90 ~400 ms")
	row("jetstream (durable) channel", durableCell(js), "Knative Kafka broker breaks at 1,100/s, e2e 400–500 ms")
	row("kafka channel (Kafka on the same machine)", durableCell(kafka), "")
	row("overload at 2× the memory broker's sustained rate", overloadCell(r.Overloads, scMemory, 2),
		"IMC OOM-killed; TriggerMesh grew to 1.2 GB")
	row("steady rate: the memory broker at half its sustained rate", steadyCell(mem), "")
	row("broker CPU per event ÷ nginx proxy_pass's, same load", floorCell(r.Floor), "")
	b.WriteString("\n")
	b.WriteString(runLine(r, link))
	b.WriteString("\n")
	return b.String()
}

// cellText keeps a cell on one table row: no newlines, no column breaks.
func cellText(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// ranCell is "" when s ran, else its cell: "not run", or "failed" and why.
func ranCell(s *scenarioResult) string {
	switch {
	case s == nil:
		return "not run"
	case s.NotRun != "":
		return "not run (" + s.NotRun + ")"
	case s.Error != "":
		return "failed: " + s.Error
	case s.sustainedStep() == nil:
		return "no sustained rate (its first step failed)"
	}
	return ""
}

func rateCell(s *scenarioResult) string {
	if c := ranCell(s); c != "" {
		return c
	}
	return thousands(s.SustainedRate()) + " events/s"
}

func halfCell(s *scenarioResult) string {
	if c := ranCell(s); c != "" {
		return c
	}
	if s.Half == nil {
		return "no latency run"
	}
	return fmt.Sprintf("%.1f ms at %s events/s", s.Half.E2E.P99, thousands(s.Half.IntendedRate))
}

func durableCell(s *scenarioResult) string {
	if c := ranCell(s); c != "" {
		return c
	}
	c := thousands(s.SustainedRate()) + " events/s"
	if s.Half != nil {
		c += fmt.Sprintf(", e2e p99 %.1f ms at half rate", s.Half.E2E.P99)
	}
	return c
}

func overloadCell(runs []*overloadResult, channel string, factor float64) string {
	for _, o := range runs {
		if o.Channel != channel || o.Factor != factor {
			continue
		}
		switch {
		case o.NotRun != "":
			return "not run (" + o.NotRun + ")"
		case o.Error != "":
			return "failed: " + o.Error
		}
		c := fmt.Sprintf("%s × 2xx, %s × 429, %s × 503, %s other", thousands(float64(o.Accepted)),
			thousands(float64(o.Rejected429)), thousands(float64(o.Rejected503)), thousands(float64(o.OtherFailures)))
		if o.Probe429 > 0 {
			c += fmt.Sprintf(" (%d of the probe's %d 429s with Retry-After)", o.Probe429RetryAfter, o.Probe429)
		}
		return c + fmt.Sprintf("; peak RSS %.0f MiB; %s accepted events lost", float64(o.PeakRSS)/mib, thousands(float64(o.Lost)))
	}
	return "not run"
}

func steadyCell(s *scenarioResult) string {
	if c := ranCell(s); c != "" {
		return c
	}
	if s.Half == nil {
		return "no latency run"
	}
	return fmt.Sprintf("%s events/s: %.0f µs of broker CPU per event; peak RSS %.0f MiB (over the ramp and this run)",
		thousands(s.Half.IntendedRate), s.Half.CPUPerEventUS, float64(s.PeakRSS)/mib)
}

func floorCell(f *floorResult) string {
	switch {
	case f == nil:
		return "not run"
	case f.NotRun != "":
		return "not run (" + f.NotRun + ")"
	case len(f.Rows) == 0 && f.Error != "":
		return "failed: " + f.Error
	}
	var groups []string
	for _, layout := range []struct{ name, text string }{
		{"pinned", "the proxy alone on 1 core"},
		{"shared", "all on the same cores"},
	} {
		var parts []string
		for _, row := range f.Rows {
			if row.Layout == layout.name {
				parts = append(parts, fmt.Sprintf("%.2f× at %s events/s", row.Ratio, thousands(row.Rate)))
			}
		}
		if len(parts) > 0 {
			groups = append(groups, layout.text+": "+strings.Join(parts, ", "))
		}
	}
	if len(groups) == 0 {
		return "no rows"
	}
	return strings.Join(groups, "; ")
}

// runLine names the run the table is from: date, commit, machine, command.
func runLine(r *results, link string) string {
	layout := "load generator, receivers and broker on the same cores"
	if r.Pinned {
		layout = "the broker on CPU 1, load generator and receivers on CPU 0"
	}
	line := fmt.Sprintf("From the run of %s at commit %s (`%s`, a full run, not --quick) on %d logical cores (%s), %s, "+
		"2 KiB events over 127.0.0.1. Every step, verdict and plot: [%s](%s).",
		r.Machine.Date, r.Commit, r.Command, r.Machine.Cores, r.Machine.Model, layout, strings.TrimSuffix(link, "README.md"), link)
	for _, n := range r.Notes {
		line += " " + n + "."
	}
	return line + "\n"
}

// thousands formats v rounded to an integer with commas: 13785 → "13,785".
func thousands(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}
