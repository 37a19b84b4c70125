package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newLoadCmd is a placeholder until the load subcommand lands.
func newLoadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "load",
		Short: "(load is being built)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("load: not built yet")
		},
	}
}
