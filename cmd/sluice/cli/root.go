// Package cli wires sluice's subcommands. Each subcommand lives in a file of its own and
// is listed in newRoot; the work is done by the packages they call.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code out of a subcommand (for example a failed SLO).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExitCode makes a subcommand's error end the process with code.
func withExitCode(code int, err error) error { return &exitError{code: code, err: err} }

// Execute runs the sluice command line and returns the process exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "A CloudEvents broker in one binary, and the load kit that measures it",
		Long: `Sluice accepts CloudEvents over HTTP and delivers each one to every trigger whose
filter matches, with retries and dead-letter sinks, on a bounded memory channel or a
durable one (JetStream, Kafka). Its load kit (gen, load, receive, bench) measures it,
or any other CloudEvents endpoint.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newServeCmd(),
		newValidateCmd(),
		newStatusCmd(),
		newTopCmd(),
		newTriggerCmd(),
		newReplayCmd(),
		newDLQCmd(),
		newGenCmd(),
		newLoadCmd(),
		newReceiveCmd(),
		newBenchCmd(),
		newVersionCmd(),
	)
	return root
}
