package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/gen"
)

// newGenCmd is `sluice gen`: cegen-compatible vegeta targets.
func newGenCmd() *cobra.Command {
	var url, data, typ, source, run string
	var count uint64
	cmd := &cobra.Command{
		Use:   "gen -u URL -d @FILE [-t TYPE] [-s SOURCE]",
		Short: "Write an endless stream of vegeta JSON targets holding CloudEvents (like cegen)",
		Long: `gen writes vegeta JSON targets to standard output, one per line, forever: each is a
POST of a binary-mode CloudEvent (ce-specversion, ce-id, ce-source, ce-type headers,
Content-Type: application/json) carrying the data file as its body. Every ce-id is
unique ("<run>-<n>"), and each target also carries ce-sluicerun and ce-sluiceseq so
that 'sluice receive' can count lost and duplicate events.

It stops cleanly when the reader closes the pipe, on Ctrl-C, or after -n targets.
For an open-model generator with latency from intended send times, use 'sluice load'.`,
		Example: `  # cegen's usage, unchanged
  sluice gen -u http://127.0.0.1:8080/demo/default -d @data.json | \
    vegeta attack -lazy -format=json -rate=1000/s -duration=30s | vegeta report

  # custom type and source, 3 targets to look at
  sluice gen -u http://127.0.0.1:9000/ -d '{"hello":"world"}' -t com.example.ping -s /me -n 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			body, err := readData(data)
			if err != nil {
				return err
			}
			if run == "" {
				run = newRunID()
			}
			// Ask for EPIPE instead of being killed by SIGPIPE, to stop cleanly.
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGPIPE)
			defer signal.Stop(sig)
			_, err = gen.Write(cmd.Context(), cmd.OutOrStdout(), gen.Options{
				URL: url, Data: body, Type: typ, Source: source, Run: run, Count: count,
			})
			if err != nil {
				return fmt.Errorf("gen: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&url, "url", "u", "", "target URL (required)")
	f.StringVarP(&data, "data", "d", "", "event data: @FILE, or the data itself (required)")
	f.StringVarP(&typ, "type", "t", cevent.DefaultType, "CloudEvent type")
	f.StringVarP(&source, "source", "s", cevent.DefaultSource, "CloudEvent source")
	f.StringVar(&run, "run", "", "run id for ce-id and ce-sluicerun (default: random)")
	f.Uint64VarP(&count, "count", "n", 0, "stop after this many targets (0 = endless)")
	_ = cmd.MarkFlagRequired("url")
	_ = cmd.MarkFlagRequired("data")
	return cmd
}
