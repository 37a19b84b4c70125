package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/loadtest/receive"
	"github.com/sluice-broker/sluice/loadtest/report"
)

// newReceiveCmd is `sluice receive`: the counting receiver.
func newReceiveCmd() *cobra.Command {
	var (
		addr, delay, output string
		merge               string
		o                   receive.Options
		quietPeriods        int
		period              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "receive [--addr :9000]",
		Short: "Receive CloudEvents, count them, and report throughput, e2e latency, loss and duplicates",
		Long: `receive accepts CloudEvents in binary, structured and batch mode and answers --status
(202). It keeps a per-second throughput series, computes end-to-end latency from the
sluicesent extension that 'sluice load' sets (HDR histogram), and counts duplicate
and lost events per run (sluicerun/sluiceseq; losses are sequence gaps, computed at
the end because a broker may reorder). Duplicates are counted, never fatal.

It stops after --quiet-periods periods of --period without a new event (counting
starts at the first event; 0 = never), or on Ctrl-C, and prints its report.
GET /metrics serves Prometheus metrics.

Fault injection for testing brokers: --fail-ratio answers that share of requests
with --fail-status (the events are not counted: a broker should retry them), and
--delay waits before answering, a fixed time (5ms) or a uniform range (1ms-20ms).

Several receivers: save each one's report with -o, then 'sluice receive --merge
r1.json,r2.json' combines them by run id: an event seen by any receiver is not
lost, one seen by two is a duplicate.`,
		Example: `  # count until 3 quiet periods of 5 s after the traffic stops
  sluice receive --addr :9000 --quiet-periods 3 --period 5s

  # a flaky, slow subscriber: 30% 503s and 5-50 ms answers
  sluice receive --addr 127.0.0.1:9000 --fail-ratio 0.3 --fail-status 503 --delay 5ms-50ms

  # combine two receivers' reports
  sluice receive --merge r1.json,r2.json -o merged.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if merge != "" {
				return mergeReceive(cmd, merge, output)
			}
			var err error
			if o.DelayMin, o.DelayMax, err = parseDelay(delay); err != nil {
				return err
			}
			if o.FailRatio < 0 || o.FailRatio > 1 {
				return errors.New("--fail-ratio must be between 0 and 1")
			}
			ln, err := receive.Listen(addr)
			if err != nil {
				return err
			}
			r := receive.New(o)
			srv, err := receive.NewServer(ln, r)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			seriesDone := make(chan struct{})
			go func() { r.Series(ctx, time.Now()); close(seriesDone) }()
			serveErr := make(chan error, 1)
			go func() { serveErr <- srv.Serve() }()
			fmt.Fprintf(cmd.ErrOrStderr(), "receive: listening on %s\n", ln.Addr())
			waitCtx, stopWait := context.WithCancel(ctx)
			go func() {
				select {
				case err := <-serveErr:
					if err != nil && !errors.Is(err, http.ErrServerClosed) {
						fmt.Fprintln(cmd.ErrOrStderr(), "receive:", err)
					}
				case <-waitCtx.Done():
				}
				stopWait()
			}()
			r.WaitQuiet(waitCtx, quietPeriods, period)
			stopWait()
			shutCtx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
			defer c2()
			_ = srv.Shutdown(shutCtx)
			cancel()
			<-seriesDone
			rep := r.Report()
			if output != "" {
				if rep, err = r.ReportForMerge(); err != nil {
					return err
				}
			}
			if err := report.WriteReceive(cmd.OutOrStdout(), rep); err != nil {
				return err
			}
			if output != "" {
				return writeJSON(output, rep)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", ":9000", "listen address")
	f.IntVar(&o.Status, "status", http.StatusAccepted, "status code answered to accepted events")
	f.Float64Var(&o.FailRatio, "fail-ratio", 0, "share of requests (0-1) answered --fail-status")
	f.IntVar(&o.FailStatus, "fail-status", http.StatusServiceUnavailable, "status code of injected failures")
	f.StringVar(&delay, "delay", "", "wait before answering: a duration (5ms) or a range (1ms-20ms)")
	f.IntVar(&quietPeriods, "quiet-periods", 0, "stop after this many periods without events (0 = never)")
	f.DurationVar(&period, "period", 5*time.Second, "length of a quiet period")
	f.StringVarP(&output, "output", "o", "", "save the report (with the per-second series, the sequence sets and the latency histogram) as JSON")
	f.StringVar(&merge, "merge", "", "merge the -o reports FILE1,FILE2,… of receivers that shared a run, print the combined report and exit")
	return cmd
}

// parseDelay parses "", "5ms" or "1ms-20ms".
func parseDelay(s string) (time.Duration, time.Duration, error) {
	if s == "" {
		return 0, 0, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := time.ParseDuration(lo)
	if err != nil || a < 0 {
		return 0, 0, fmt.Errorf("--delay %q: bad duration", s)
	}
	if !isRange {
		return a, a, nil
	}
	b, err := time.ParseDuration(hi)
	if err != nil || b < a {
		return 0, 0, fmt.Errorf("--delay %q: want MIN-MAX with MIN ≤ MAX", s)
	}
	return a, b, nil
}

// mergeReceive reads receiver reports, merges them and prints the result.
func mergeReceive(cmd *cobra.Command, files, output string) error {
	var reps []*receive.Report
	for _, name := range strings.Split(files, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return fmt.Errorf("--merge: %w", err)
		}
		var r receive.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("--merge %s: %w", name, err)
		}
		reps = append(reps, &r)
	}
	m, err := receive.Merge(reps)
	if err != nil {
		return fmt.Errorf("--merge: %w", err)
	}
	if err := report.WriteReceive(cmd.OutOrStdout(), m); err != nil {
		return err
	}
	if output != "" {
		return writeJSON(output, m)
	}
	return nil
}
