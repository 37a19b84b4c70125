package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newServeCmd is a placeholder until the serve subcommand lands.
func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "(serve is being built)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("serve: not built yet")
		},
	}
}
