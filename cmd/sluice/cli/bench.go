package cli

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/report"
	"github.com/sluice-broker/sluice/loadtest/slo"
)

// exitSLOFailed is the exit code of a bench run whose SLO failed.
const exitSLOFailed = 2

// newBenchCmd is `sluice bench`: load + receiver + report directory + SLO verdict.
func newBenchCmd() *cobra.Command {
	var (
		lf                 loadFlags
		receiverAddr, out  string
		sloText, label     string
		direct, quiet, cmp bool
		settle             time.Duration
		findMax            bool
		search             bench.Search
		precisionPct       float64
		backlog            int64
		faultFlags         []string
	)
	cmd := &cobra.Command{
		Use:   "bench (--target URL | --direct) [load flags] [--out DIR] [--slo OBJECTIVES]",
		Short: "Run load and receiver together through a target and write a report directory",
		Long: `bench starts a receiver in-process (--receiver-addr), runs 'sluice load' against the
target — a broker whose trigger delivers to the receiver, or, with --direct, the
receiver itself as a baseline — waits until every event the target accepted has
arrived (or --settle passes), and writes a report directory (--out):

  summary.txt   the load's vegeta-style report, the receiver's, loss, SLO verdicts
  results.json  everything, including the per-second series
  seconds.csv   one row per second: send and delivery rates, latency percentiles, lost
  *.png         latency by rate step (pace and ramp runs), latency by percentile,
                publish and end-to-end latency, throughput (sent vs delivered) and
                failures (failed, lost, duplicates) over time
  index.html    one self-contained page: figures, plots in two columns, tables; no
                external resources

Lost events are those the target answered 2xx but that never reached the receiver.

--slo makes the exit code a verdict (0 pass, 2 fail). Objectives are comma-separated
KEY OP VALUE clauses: latency keys p50 p90 p95 p99 p99.9 p99.99 max mean min are publish
latency, the same with an e2e. prefix are end-to-end latency (values like 50ms; a bare
number is ms); success (% of 2xx), loss (lost events), loss% (of accepted), dup
(duplicates), errors (failed requests), rate (achieved requests/s). Operators:
< <= > >= = !=.

--find-max searches for the highest rate that holds the --slo objectives for
--duration (each step's length): it starts at --start-rate, doubles the rate after
every step that holds them until one fails (or halves it until one holds), then
bisects between the highest passing and the lowest failing rate until they are within
--precision percent, in at most --max-steps steps. It prints every step (rate,
verdict, the objectives that failed) and "max sustainable: N events/s"; the report
directory holds the run of the highest passing step, and results.json the search
(find_max). Exit code 0 when some rate held, 2 when none did.

--backlog N sends N events at --rate while the receiver answers 503, then opens it
and reports the time to drain (from the opening until every accepted event arrived) and
the catch-up rate (events/s delivered while draining). --fault 'at=20s,run=COMMAND'
(repeatable) runs COMMAND with bash -c 20 s into the run and reports its exit code,
output, the recovery of ingress and of the backlog, and the events lost; the plots mark it.

--compare DIR1 DIR2 [DIR…] renders earlier runs side by side into --out instead: one
column and one line per run, named by its --label or else its directory's name.`,
		Example: `  # baseline: straight into the receiver, 500 events/s for 10 s
  sluice bench --direct --rate 500 --duration 10s --out report-direct

  # through a broker whose trigger points at http://127.0.0.1:9000/
  sluice bench --target http://127.0.0.1:8080/demo/default --pace 1000:30,1200:30 \
    --warmup 5s --data @sample-ce-data.json --out report-broker \
    --slo 'p99<50ms,e2e.p99<100ms,loss=0,success>=99.9'

  # how fast the broker drains 20,000 events its subscriber refused
  sluice bench --target http://127.0.0.1:8080/demo/default --backlog 20000 --rate 1000 --out report-backlog

  # kill the broker 20 s into the run
  sluice bench --target http://127.0.0.1:8080/demo/default --duration 60s \
    --fault 'at=20s,run=kill -9 $(cat broker.pid)' --out report-fault

  # side by side
  sluice bench --compare report-direct report-broker --out report-compare

  # the highest rate the broker sustains for 10 s with e2e p99 under 50 ms and no loss
  sluice bench --target http://127.0.0.1:8080/demo/default --find-max \
    --slo 'e2e.p99<50ms,loss=0' --duration 10s --start-rate 1000 --precision 5 --out report-max`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmp {
				if len(args) < 2 {
					return errors.New("--compare needs two or more report directories")
				}
				runs, names := make([]*report.Saved, len(args)), make([]string, len(args))
				for i, dir := range args {
					s, err := report.Load(dir)
					if err != nil {
						return err
					}
					runs[i], names[i] = s, s.Label
					if s.Label == "" {
						names[i] = filepath.Base(filepath.Clean(dir))
					}
				}
				if err := report.Compare(out, runs, names); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "comparison written to %s\n", filepath.Join(out, report.HTMLFile))
				return nil
			}
			if len(args) != 0 {
				return fmt.Errorf("unexpected arguments %q (did you mean --compare?)", args)
			}
			objs, err := slo.Parse(sloText)
			if err != nil {
				return err
			}
			if findMax {
				for _, name := range []string{"rate", "pace", "ramp"} {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--find-max chooses each step's rate itself: drop --%s (the search starts at --start-rate)", name)
					}
				}
			}
			if !direct && lf.target == "" {
				return errors.New("--target is required unless --direct")
			}
			faults, err := parseFaults(faultFlags)
			if err != nil {
				return err
			}
			if findMax && len(faults) > 0 {
				return errors.New("--fault runs once in a run: drop it with --find-max")
			}
			if cmd.Flags().Changed("backlog") {
				if err := checkBacklog(cmd, backlog, direct, findMax); err != nil {
					return err
				}
			}
			if lf.target == "" {
				lf.target = "http://placeholder/" // replaced by the receiver's address
			}
			lo, err := lf.options()
			if err != nil {
				return err
			}
			if backlog > 0 { // exactly ⌈N / events per request⌉ requests at --rate
				reqs := (backlog + int64(lo.Template.EventsPerRequest()) - 1) / int64(lo.Template.EventsPerRequest())
				lf.duration = time.Duration(math.Round(float64(reqs) / lf.rate * 1e9))
				if lo, err = lf.options(); err != nil {
					return err
				}
			}
			o := bench.Options{Load: lo, ReceiverAddr: receiverAddr, Direct: direct, Settle: settle,
				Backlog: uint64(max(backlog, 0)), Faults: faults}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			if findMax {
				search.Objectives, search.StepDuration, search.Precision = objs, lf.duration, precisionPct/100
				return runFindMax(cmd, o, search, label, out, quiet)
			}
			res, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			saved := &report.Saved{Result: res, Label: label, Finished: time.Now()}
			var pass = true
			if len(objs) > 0 {
				saved.SLO, pass = slo.Check(objs, res.Metrics())
				saved.SLOPass = &pass
			}
			if err := report.WriteSummary(cmd.OutOrStdout(), saved); err != nil {
				return err
			}
			if err := report.WriteDir(out, saved); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nreport written to %s\n", filepath.Join(out, report.HTMLFile))
			if !pass {
				return withExitCode(exitSLOFailed, errors.New("SLO failed"))
			}
			return nil
		},
	}
	f := cmd.Flags()
	lf.register(f)
	f.StringVar(&receiverAddr, "receiver-addr", "127.0.0.1:9000", "listen address of the in-process receiver")
	f.BoolVar(&direct, "direct", false, "send straight to the receiver (a baseline without a broker)")
	f.DurationVar(&settle, "settle", 10*time.Second, "after the load, wait at most this long for accepted events to arrive")
	f.StringVar(&out, "out", "bench-report", "report directory")
	f.StringVar(&sloText, "slo", "", "objectives that decide the exit code, e.g. 'p99<50ms,loss=0,success>=99.9'")
	f.StringVar(&label, "label", "", "a name for this run in the report")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress line on stderr")
	f.BoolVar(&cmp, "compare", false, "compare the report directories given as arguments (two or more), into --out")
	f.BoolVar(&findMax, "find-max", false, "search for the highest rate that holds --slo for --duration (ramp, then bisect)")
	f.Float64Var(&search.Start, "start-rate", 1000, "--find-max: the first step's rate, requests/s")
	f.Float64Var(&precisionPct, "precision", 5, "--find-max: stop when the lowest failing rate is within this many percent of the highest passing one")
	f.IntVar(&search.MaxSteps, "max-steps", 20, "--find-max: at most this many steps")
	f.Int64Var(&backlog, "backlog", 0, "send N events at --rate while the receiver refuses them (503), then let it accept: report catch-up rate and time to drain")
	f.StringArrayVar(&faultFlags, "fault", nil, "run a shell command at a time in the run: 'at=20s,run=COMMAND' (repeatable); the report gives its exit code, recovery and loss")
	return cmd
}

// maxBacklog bounds --backlog: bench keeps one bit per event sent.
const maxBacklog = 10_000_000

// checkBacklog validates --backlog N against the other flags.
func checkBacklog(cmd *cobra.Command, n int64, direct, findMax bool) error {
	switch {
	case n <= 0:
		return fmt.Errorf("--backlog %d: give the number of events to hold back, more than 0", n)
	case n > maxBacklog:
		return fmt.Errorf("--backlog %d: at most %d events", n, maxBacklog)
	case direct:
		return errors.New("--backlog needs a broker to hold the events: drop --direct and give its --target")
	case findMax:
		return errors.New("--backlog and --find-max do not go together: drop one")
	}
	for _, name := range []string{"duration", "pace", "ramp", "warmup"} {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--backlog N sends exactly N events at --rate: drop --%s", name)
		}
	}
	return nil
}

// parseFaults parses the --fault flags.
func parseFaults(flags []string) ([]bench.Fault, error) {
	if len(flags) > bench.MaxFaults {
		return nil, fmt.Errorf("--fault given %d times, at most %d", len(flags), bench.MaxFaults)
	}
	var out []bench.Fault
	for _, s := range flags {
		f, err := bench.ParseFault(s)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// runFindMax runs a --find-max search, prints its steps and result, and writes the
// report of its highest passing step.
func runFindMax(cmd *cobra.Command, o bench.Options, s bench.Search, label, out string, quiet bool) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	epr := float64(o.Load.Template.EventsPerRequest())
	if !quiet {
		fmt.Fprintf(stderr, "find-max: %s for %s a step, from %.0f events/s, precision %g%%, at most %d steps\n",
			sloText(s), s.StepDuration, s.Start*epr, 100*s.Precision, s.MaxSteps)
		s.OnStep = func(st bench.SearchStep) { fmt.Fprintln(stderr, "find-max:", stepLine(st)) }
	}
	res, err := bench.FindMax(cmd.Context(), o, s)
	if res == nil {
		return err
	}
	saved := &report.Saved{Result: res, Label: label, Finished: time.Now()}
	var pass bool
	saved.SLO, pass = slo.Check(s.Objectives, res.Metrics())
	saved.SLOPass = &pass
	if werr := report.WriteSummary(stdout, saved); werr != nil {
		return werr
	}
	if werr := report.WriteDir(out, saved); werr != nil {
		return werr
	}
	fm := res.FindMax
	fmt.Fprintf(stdout, "\n== Find max (%s for %s a step)\n", fm.Objectives, fm.StepDuration)
	for _, st := range fm.Steps {
		fmt.Fprintln(stdout, stepLine(st))
	}
	fmt.Fprintf(stdout, "max sustainable: %.0f events/s\n", fm.MaxEvents)
	fmt.Fprintf(stdout, "search: %s\n", fm.Stopped)
	which := "the last step (none passed)"
	if fm.Max > 0 {
		which = fmt.Sprintf("the %.0f events/s step", fm.MaxEvents)
	}
	fmt.Fprintf(stdout, "\nreport of %s written to %s\n", which, filepath.Join(out, report.HTMLFile))
	if err != nil {
		return err
	}
	if fm.Max == 0 {
		return withExitCode(exitSLOFailed, errors.New("find-max: no rate held the objectives"))
	}
	return nil
}

// sloText joins a search's objectives as the user wrote them.
func sloText(s bench.Search) string {
	var b strings.Builder
	for i, o := range s.Objectives {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(o.Text)
	}
	return b.String()
}

// stepLine renders one step: "step 3: 2250 events/s FAIL success>=99: 97.8% FAIL".
func stepLine(st bench.SearchStep) string {
	verdict := "PASS"
	switch {
	case st.Undecided:
		verdict = fmt.Sprintf("UNDECIDED: held, but the generator sent only %.0f requests/s", st.Achieved)
	case !st.Pass:
		verdict = "FAIL " + strings.Join(st.Failed, "; ")
	}
	return fmt.Sprintf("step %2d: %8.0f events/s  %s", st.Step, st.Events, verdict)
}
