package agent

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteAgents prints the agents table of a distributed run: share, clock skew,
// requests, rates and the verdict of each agent.
func WriteAgents(w io.Writer, agents []AgentReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "Agents\tshare\tclock skew\tround trip\trequests\tintended/s\tachieved/s\tverdict")
	for _, a := range agents {
		verdict := "ok"
		switch {
		case a.Error != "":
			verdict = "FAILED: " + a.Error
		case a.Behind:
			verdict = fmt.Sprintf("BEHIND its share (%.1f%% of it)", 100*a.Rate/a.IntendedRate)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%v\t%v\t%d\t%.1f\t%.1f\t%s\n", a.Addr, a.Share,
			a.Skew.Round(time.Microsecond), a.RTT.Round(time.Microsecond), a.Requests, a.IntendedRate, a.Rate, verdict)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("agents table: %w", err)
	}
	return nil
}
