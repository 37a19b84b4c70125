package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/broker"
)

func newTriggerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trigger",
		Short: "Pause or resume a trigger of a running 'sluice serve'",
		Long: `Pause or resume the deliveries of one trigger (or subscription) of a running
'sluice serve'. A paused trigger delivers nothing; its events keep being accepted and
stored (on a memory channel within --memory-limit, then 429). On resume they are
delivered, in order per key where ordering is on. The state lasts until the next
pause or resume, a change of the trigger's sluice.dev/paused annotation, or a restart:
the annotation is the durable way (docs/pause.md). The server must run with
--ops-token-file: without it, pause and resume answer 403.`,
	}
	cmd.AddCommand(newTriggerActionCmd("pause"), newTriggerActionCmd("resume"))
	return cmd
}

func newTriggerActionCmd(action string) *cobra.Command {
	var addr, tokenFile string
	cmd := &cobra.Command{
		Use:     action + " NAMESPACE/NAME",
		Short:   strings.ToUpper(action[:1]) + action[1:] + " the deliveries of a trigger (POST /triggers/NAMESPACE/NAME/" + action + ")",
		Example: "  sluice trigger " + action + " --addr 127.0.0.1:8080 default/my-trigger",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				return fmt.Errorf("trigger %q: want NAMESPACE/NAME", args[0])
			}
			base := addr
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			c, err := opsClient(&http.Client{Timeout: 10 * time.Second}, tokenFile)
			if err != nil {
				return err
			}
			u := strings.TrimSuffix(base, "/") + broker.TriggersPath + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/" + action
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, u, nil)
			if err != nil {
				return err
			}
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
				return fmt.Errorf("POST %s: %s: %s", req.URL, resp.Status, strings.TrimSpace(string(msg)))
			}
			var st broker.TriggerState
			if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st); err != nil {
				return fmt.Errorf("POST %s: %w", req.URL, err)
			}
			state := "delivering"
			if st.Paused {
				state = "paused"
				if action == "resume" { // the API's pause is cleared, not the annotation's
					state += " (by " + strings.Join(st.PausedBy, ", ") + ": a resume clears only a pause sent through the API)"
				}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "trigger %s: %s\n", st.Trigger, state)
			return err
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address of the running sluice serve")
	cmd.Flags().StringVar(&tokenFile, "ops-token-file", "", "send the token in this file as Authorization: Bearer (the server's --ops-token-file)")
	return cmd
}
