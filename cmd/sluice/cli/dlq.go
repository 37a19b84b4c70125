package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/internal/bytesize"
)

// dlqFlags are sluice serve's flags of the dead-letter store.
type dlqFlags struct {
	maxEntries int
	maxBytes   bytesize.Size
	maxAge     time.Duration
	memory     bytesize.Size // 0: a quarter of --memory-limit
}

func (f *dlqFlags) register(fl *pflag.FlagSet) {
	f.maxBytes = dlq.DefaultMaxBytes
	fl.IntVar(&f.maxEntries, "dlq-max-entries", dlq.DefaultMaxEntries, "dead letters kept per trigger that has no deadLetterSink; past it the oldest are evicted (0: keep none, log and drop them; see docs/dead-letters.md)")
	fl.Var(&f.maxBytes, "dlq-max-bytes", "bytes of dead letters kept per trigger; past it the oldest are evicted")
	fl.DurationVar(&f.maxAge, "dlq-max-age", dlq.DefaultMaxAge, "how long a dead letter is kept")
	fl.Var(&f.memory, "dlq-memory-limit", "bytes of dead letters kept in memory, all triggers together (the store of brokers whose channel keeps none); past it the oldest are evicted (default: a quarter of --memory-limit)")
}

// memoryTotal is --dlq-memory-limit, or a quarter of memoryLimit (--memory-limit).
func (f *dlqFlags) memoryTotal(memoryLimit int64) int64 {
	if f.memory > 0 {
		return int64(f.memory)
	}
	return max(memoryLimit/4, 1)
}

// limits are the flags as the broker's store limits.
func (f *dlqFlags) limits() dlq.Limits {
	return dlq.Limits{MaxEntries: f.maxEntries, MaxBytes: int64(f.maxBytes), MaxAge: f.maxAge}
}

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, redrive or purge the dead letters of a trigger of a running 'sluice serve'",
		Long: `A trigger's events that fail for good when neither it nor its broker has a
deadLetterSink are kept in its dead-letter store, with the attempts made, the last
status and the start of the last response: in the durable channel's backend on
JetStream and Kafka (every replica sees the same store), in memory otherwise. The store
is bounded per trigger (sluice serve --dlq-max-entries, --dlq-max-bytes, --dlq-max-age),
in memory also for all triggers together (--dlq-memory-limit); the oldest are evicted
first.

'redrive' delivers them once more with the trigger's delivery spec, within its caps
and not while it is paused; each leaves the store only once that delivery is settled
(delivered, or stored again as a new dead letter). 'purge' of all of them stops a
redrive. list, redrive and purge need the server's
--ops-token-file (403 without it): a listing shows the events' data. See
docs/dead-letters.md.`,
	}
	cmd.AddCommand(newDLQListCmd(), newDLQActionCmd("redrive"), newDLQActionCmd("purge"))
	return cmd
}

// dlqTarget is what every dlq subcommand needs: the server, the token and the trigger.
type dlqTarget struct {
	addr, tokenFile, trigger string
}

func (d *dlqTarget) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.addr, "addr", "127.0.0.1:8080", "address of the running sluice serve")
	cmd.Flags().StringVar(&d.tokenFile, "ops-token-file", "", "send the token in this file as Authorization: Bearer (the server's --ops-token-file)")
	cmd.Flags().StringVar(&d.trigger, "trigger", "", "the trigger, NAMESPACE/NAME (required)")
	_ = cmd.MarkFlagRequired("trigger")
}

// do sends method to the trigger's dlq endpoint + suffix with query q and decodes a
// JSON answer of status want into out.
func (d *dlqTarget) do(cmd *cobra.Command, method, suffix string, q url.Values, want int, out any) error {
	ns, name, ok := strings.Cut(d.trigger, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--trigger %q: want NAMESPACE/NAME", d.trigger)
	}
	base := d.addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c, err := opsClient(&http.Client{Timeout: 30 * time.Second}, d.tokenFile)
	if err != nil {
		return err
	}
	u := strings.TrimSuffix(base, "/") + broker.TriggersPath + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/dlq" + suffix
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(cmd.Context(), method, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("%s %s: %s: %s", method, req.URL, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: %w", method, req.URL, err)
	}
	return nil
}

func newDLQListCmd() *cobra.Command {
	var d dlqTarget
	var output string
	var after uint64
	var limit int
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List a trigger's dead letters, oldest first (GET /triggers/NAMESPACE/NAME/dlq)",
		Example: "  sluice dlq list --addr 127.0.0.1:8080 --trigger default/my-trigger\n  sluice dlq list --trigger default/my-trigger -o json --limit 1000",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			if cmd.Flags().Changed("limit") && (limit < 1 || limit > dlq.MaxPage) {
				return fmt.Errorf("--limit %d: want 1 to %d", limit, dlq.MaxPage)
			}
			q := url.Values{}
			if after > 0 {
				q.Set("after", strconv.FormatUint(after, 10))
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var p broker.DLQPage
			if err := d.do(cmd, http.MethodGet, "", q, http.StatusOK, &p); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if output == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(p)
			}
			return printDLQ(w, &p)
		},
	}
	d.register(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().Uint64Var(&after, "after", 0, "list the dead letters after this id (the next page)")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("dead letters per page, up to %d (default 100)", dlq.MaxPage))
	return cmd
}

// printDLQ writes p as a table.
func printDLQ(w io.Writer, p *broker.DLQPage) error {
	where := "memory"
	if p.Durable {
		where = "durable"
	}
	fmt.Fprintf(w, "trigger %s: %d dead letters, %d bytes (%s)\n", p.Trigger, p.Total, p.Bytes, where)
	if r := p.Redrive; r != nil {
		fmt.Fprintf(w, "redrive running: %d of %d handed to the trigger\n", r.Done, r.Total)
	}
	if len(p.Entries) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTORED\tATTEMPTS\tCODE\tEVENT ID\tTYPE\tSOURCE\tREASON")
	for _, e := range p.Entries {
		var ev struct{ ID, Type, Source string }
		_ = json.Unmarshal(e.Event, &ev)
		reason := strings.Join(strings.Fields(e.Reason), " ")
		if len(reason) > 60 {
			reason = reason[:60] + "…"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", e.ID, e.Time.UTC().Format(time.RFC3339), e.Attempts, e.Code,
			ev.ID, ev.Type, ev.Source, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.Next != 0 {
		fmt.Fprintf(w, "more: --after %d\n", p.Next)
	}
	return nil
}

func newDLQActionCmd(action string) *cobra.Command {
	var d dlqTarget
	var ids []uint
	var perSec int
	short := map[string]string{
		"redrive": "Deliver a trigger's dead letters once more (POST /triggers/NAMESPACE/NAME/dlq/redrive)",
		"purge":   "Delete a trigger's dead letters (POST /triggers/NAMESPACE/NAME/dlq/purge)",
	}[action]
	cmd := &cobra.Command{
		Use:     action,
		Short:   short,
		Example: "  sluice dlq " + action + " --addr 127.0.0.1:8080 --trigger default/my-trigger --ops-token-file ops.token\n  sluice dlq " + action + " --trigger default/my-trigger --id 12 --id 13",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("rate") && (perSec < 1 || perSec > broker.MaxRedriveRate) {
				return fmt.Errorf("--rate %d: want 1 to %d", perSec, broker.MaxRedriveRate)
			}
			q := url.Values{}
			for _, id := range ids {
				q.Add("id", strconv.FormatUint(uint64(id), 10))
			}
			w := cmd.OutOrStdout()
			if action == "purge" {
				var p broker.DLQPurge
				if err := d.do(cmd, http.MethodPost, "/purge", q, http.StatusOK, &p); err != nil {
					return err
				}
				_, err := fmt.Fprintf(w, "trigger %s: %d dead letters purged\n", p.Trigger, p.Purged)
				return err
			}
			if perSec > 0 {
				q.Set("rate", strconv.Itoa(perSec))
			}
			var r broker.DLQRedrive
			if err := d.do(cmd, http.MethodPost, "/redrive", q, http.StatusAccepted, &r); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "trigger %s: redriving %d dead letters at %d/s ('sluice dlq list' shows the progress)\n", r.Trigger, r.Total, r.Rate)
			return err
		},
	}
	d.register(cmd)
	cmd.Flags().UintSliceVar(&ids, "id", nil, "only these dead letters (repeat, or comma-separated; default: all)")
	if action == "redrive" {
		cmd.Flags().IntVar(&perSec, "rate", 0, fmt.Sprintf("dead letters handed to the trigger per second, 1 to %d (default %d)", broker.MaxRedriveRate, broker.DefaultRedriveRate))
	}
	return cmd
}
