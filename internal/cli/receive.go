package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// newReceiveCmd is a placeholder until the receive subcommand lands.
func newReceiveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "receive",
		Short: "(receive is being built)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("receive: not built yet")
		},
	}
}
