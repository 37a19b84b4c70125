package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/broker"
)

func newStatusCmd() *cobra.Command {
	var (
		addr      string
		output    string
		tokenFile string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every object a running 'sluice serve' runs, ready or not and why",
		Long: `Ask a running 'sluice serve' (GET /status) for the objects of its configuration and
print them like 'sluice validate' does, with what fails at run time on top: a channel
that would not open, or one that cannot store events now (its Kafka cluster or NATS
server unreachable), for as long as ingress answers its senders 503. The exit status is
1 if any object is not ready.`,
		Example: `  sluice status --addr 127.0.0.1:8080
  sluice status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base := addr
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			c, err := opsClient(&http.Client{Timeout: 10 * time.Second}, tokenFile)
			if err != nil {
				return err
			}
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, strings.TrimSuffix(base, "/")+"/status", nil)
			if err != nil {
				return err
			}
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
			}
			var rep broker.StatusReport
			if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
				return fmt.Errorf("GET %s: %w", req.URL, err)
			}
			if err := printObjects(cmd.OutOrStdout(), rep.Objects, output); err != nil {
				return err
			}
			if !rep.Ready {
				return withExitCode(1, fmt.Errorf("not every object is ready"))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address of the running sluice serve")
	cmd.Flags().StringVar(&tokenFile, "ops-token-file", "", "send the token in this file as Authorization: Bearer (the server's --ops-token-file)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, wide or json")
	return cmd
}
