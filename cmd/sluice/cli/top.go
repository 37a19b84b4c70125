package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/ui"
)

// Terminal control sequences of top: the alternate screen (left as it was on exit), the
// cursor hidden, and each frame drawn from the top-left corner over a cleared screen.
const (
	altScreenOn  = "\x1b[?1049h\x1b[?25l"
	altScreenOff = "\x1b[?25h\x1b[?1049l"
	frameStart   = "\x1b[H\x1b[2J"
)

func newTopCmd() *cobra.Command {
	var (
		addr      string
		interval  time.Duration
		once      bool
		tokenFile string
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch a running 'sluice serve': rates, queues, latency and dead letters, refreshed every second",
		Long: `Show what a running 'sluice serve' is doing, like top: per broker the ingress and
rejection rates, per trigger the delivery and failure rates, queue depth, attempts in
flight and the limit the adaptive controller chose, delivery latency p50/p99 over the
last minute, and the last dead-lettered events with their reason. It reads the same
snapshot as the dashboard (GET /ui/snapshot.json) and redraws every --interval; Ctrl-C
ends it. With --once, or when the output is not a terminal, it prints one frame and exits.`,
		Example: `  sluice top --addr 127.0.0.1:8080
  sluice top --addr http://broker.internal:8080 --once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 100*time.Millisecond {
				return fmt.Errorf("--interval %v: want at least 100ms", interval)
			}
			base := addr
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			c, err := opsClient(&http.Client{Timeout: 5 * time.Second}, tokenFile)
			if err != nil {
				return err
			}
			return runTop(cmd.Context(), c, cmd.OutOrStdout(), strings.TrimSuffix(base, "/"), interval, once)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address (or URL) of the running sluice serve")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to refresh")
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	cmd.Flags().StringVar(&tokenFile, "ops-token-file", "", "send the token in this file as Authorization: Bearer (the server's --ops-token-file)")
	return cmd
}

// runTop draws frames until ctx ends; on a terminal, in the alternate screen.
func runTop(ctx context.Context, c *http.Client, out io.Writer, base string, interval time.Duration, once bool) error {
	_, cols, tty := termSize(out)
	if once || !tty {
		s, err := fetchSnapshot(ctx, c, base)
		if err != nil {
			return err
		}
		_, err = io.WriteString(out, renderTop(s, base, nil, 0, cols))
		return err
	}
	io.WriteString(out, altScreenOn)
	defer io.WriteString(out, altScreenOff)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		rows, cols, _ := termSize(out) // follows a resized window
		s, err := fetchSnapshot(ctx, c, base)
		if ctx.Err() != nil {
			return nil
		}
		io.WriteString(out, frameStart+strings.ReplaceAll(renderTop(s, base, err, rows, cols), "\n", "\r\n"))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// termSize returns the size of out when it is a terminal; otherwise no row limit and
// 120 columns.
func termSize(out io.Writer) (rows, cols int, tty bool) {
	if f, ok := out.(*os.File); ok {
		if r, c, err := pty.Getsize(f); err == nil && c > 0 {
			return r, c, true
		}
	}
	return 0, 120, false
}

func fetchSnapshot(ctx context.Context, c *http.Client, base string) (*ui.Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+ui.SnapshotPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	var s ui.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("GET %s: %w", req.URL, err)
	}
	return &s, nil
}

// renderTop draws one frame of s (or of err, keeping nothing) in at most rows lines (0:
// no limit) of cols columns.
func renderTop(s *ui.Snapshot, base string, err error, rows, cols int) string {
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	if err != nil || s == nil {
		add("sluice top — %s — %s", base, time.Now().Format("15:04:05"))
		add("")
		add("cannot read the snapshot: %v", err)
		add("(retrying every interval; Ctrl-C quits)")
		return fit(lines, rows, cols)
	}
	add("sluice top — %s — %s   rates over %.0f s, latency over %.0f s", base, s.Time.Local().Format("15:04:05"), s.RateSeconds, s.LatencySeconds)
	add("")
	add("%-28s %10s %10s %12s %10s", "BROKER", "INGRESS/s", "REJECT/s", "ACCEPTED", "REJECTED")
	for _, b := range s.Brokers {
		add("%-28s %10s %10s %12.0f %10.0f", clip(b.Name, 28), rateText(b.IngressRate), rateText(b.RejectedRate), b.AcceptedTotal, b.RejectedTotal)
	}
	if len(s.Brokers) == 0 {
		add("(no broker)")
	}
	add("")
	// 100 columns in all.
	add("%-20s %8s %7s %7s %5s %5s %8s %8s %9s %6s %7s", "TRIGGER", "DELIV/s", "FAIL/s", "QUEUE", "INFL", "LIMIT", "P50", "P99", "DELIVERED", "DEAD", "UNDELIV")
	for _, t := range s.Triggers {
		add("%-20s %8s %7s %7.0f %5.0f %5.0f %8s %8s %9.0f %6.0f %7.0f", clip(t.Name, 20), rateText(t.DeliveryRate), rateText(t.FailureRate),
			t.QueueDepth, t.InFlight, t.InFlightLimit, msText(t.P50), msText(t.P99), t.DeliveredTotal, t.DeadLetteredTotal, t.UndeliverableTotal)
	}
	if len(s.Triggers) == 0 {
		add("(no trigger)")
	}
	add("")
	add("LAST DEAD LETTERS (%d since start)", s.DeadLettersSeen)
	for _, d := range s.DeadLetters {
		add("%s  %-20s %-13s %3d  %s  %s", d.Time.Local().Format("15:04:05"), clip(d.Trigger, 20), d.Outcome, d.Code, d.ID, oneLineReason(d.Reason))
	}
	if len(s.DeadLetters) == 0 {
		add("(none)")
	}
	return fit(lines, rows, cols)
}

// fit cuts lines to cols runes and to rows lines (0: no limit), and joins them.
func fit(lines []string, rows, cols int) string {
	if rows > 0 && len(lines) > rows-1 {
		lines = lines[:max(rows-1, 1)]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(clip(l, cols))
		b.WriteByte('\n')
	}
	return b.String()
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func rateText(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func msText(v *float64) string {
	switch {
	case v == nil:
		return "–"
	case *v >= 100:
		return fmt.Sprintf("%.0fms", *v)
	case *v >= 1:
		return fmt.Sprintf("%.1fms", *v)
	}
	return fmt.Sprintf("%.2fms", *v)
}
