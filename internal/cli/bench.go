package cli

import (
	"errors"
	"fmt"
	"path/filepath"
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
  *.png         publish latency, end-to-end latency, send throughput, delivery
                throughput, send failures and lost events over time
  index.html    one self-contained page: tables and plots inlined, no external resources

Lost events are those the target answered 2xx but that never reached the receiver.

--slo makes the exit code a verdict (0 pass, 2 fail). Objectives are comma-separated
KEY OP VALUE clauses: latency keys p50 p90 p95 p99 p99.9 p99.99 max mean min are publish
latency, the same with an e2e. prefix are end-to-end latency (values like 50ms; a bare
number is ms); success (% of 2xx), loss (lost events), loss% (of accepted), dup
(duplicates), errors (failed requests), rate (achieved requests/s). Operators:
< <= > >= = !=.

--compare DIR1 DIR2 renders two earlier runs side by side into --out instead.`,
		Example: `  # baseline: straight into the receiver, 500 events/s for 10 s
  sluice bench --direct --rate 500 --duration 10s --out report-direct

  # through a broker whose trigger points at http://127.0.0.1:9000/
  sluice bench --target http://127.0.0.1:8080/demo/default --pace 1000:30,1200:30 \
    --warmup 5s --data @sample-ce-data.json --out report-broker \
    --slo 'p99<50ms,e2e.p99<100ms,loss=0,success>=99.9'

  # side by side
  sluice bench --compare report-direct report-broker --out report-compare`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmp {
				if len(args) != 2 {
					return errors.New("--compare needs two report directories")
				}
				a, err := report.Load(args[0])
				if err != nil {
					return err
				}
				b, err := report.Load(args[1])
				if err != nil {
					return err
				}
				if err := report.Compare(out, a, b, filepath.Base(filepath.Clean(args[0])), filepath.Base(filepath.Clean(args[1]))); err != nil {
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
			if !direct && lf.target == "" {
				return errors.New("--target is required unless --direct")
			}
			if lf.target == "" {
				lf.target = "http://placeholder/" // replaced by the receiver's address
			}
			lo, err := lf.options()
			if err != nil {
				return err
			}
			o := bench.Options{Load: lo, ReceiverAddr: receiverAddr, Direct: direct, Settle: settle}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
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
	f.BoolVar(&cmp, "compare", false, "compare two report directories given as arguments, into --out")
	return cmd
}
