package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchCmd is a placeholder until the bench subcommand lands.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "(bench is being built)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("bench: not built yet")
		},
	}
}
