package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newGenCmd is a placeholder until the gen subcommand lands.
func newGenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gen",
		Short: "(gen is being built)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("gen: not built yet")
		},
	}
}
