package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/broker"
)

// replayQuiet is how long `sluice replay` waits for a progress line (the server writes
// one a second) before it takes the server for gone.
const replayQuiet = 30 * time.Second

func newReplayCmd() *cobra.Command {
	var addr, tokenFile, trig, from, to string
	var rate float64
	cmd := &cobra.Command{
		Use:   "replay --trigger NAMESPACE/NAME --from TIME [--to TIME] [--rate N]",
		Short: "Re-deliver a trigger's stored events of a time window (POST /triggers/NAMESPACE/NAME/replay)",
		Long: `Re-deliver to a trigger's subscriber the events its broker's channel stored from
--from up to --to (RFC 3339 times; --to defaults to now), through the trigger's filter,
with its delivery spec, caps and pause, each marked with the sluicereplay extension
(the replay's id). It prints progress every second and, at the end, how many events
were re-delivered. The channel must keep delivered events: kafka and kinesis do for
the broker's sluice.dev/retention or the topic's or stream's own, jetstream only with
sluice.dev/retention; a memory channel, a window before the retention, and a second
replay of the same trigger are refused. The server must run
with --ops-token-file.

A replay that stops early (the server restarts, the connection drops) is not resumed:
this command exits non-zero saying how many events were re-delivered; the events stay
stored, so running it again re-delivers the window (those already re-delivered too).`,
		Example: "  sluice replay --addr 127.0.0.1:8080 --trigger default/my-trigger --from 2026-11-27T09:00:00Z --to 2026-11-27T10:00:00Z --rate 50",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, name, ok := strings.Cut(trig, "/")
			if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				return fmt.Errorf("--trigger %q: want NAMESPACE/NAME", trig)
			}
			q := url.Values{}
			if _, err := time.Parse(time.RFC3339, from); err != nil {
				return fmt.Errorf("--from %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", from)
			}
			q.Set("from", from)
			if to != "" {
				if _, err := time.Parse(time.RFC3339, to); err != nil {
					return fmt.Errorf("--to %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", to)
				}
				q.Set("to", to)
			}
			if !(rate > 0 && rate <= broker.MaxReplayRate) {
				return fmt.Errorf("--rate %g: want events a second above 0 up to %d", rate, broker.MaxReplayRate)
			}
			q.Set("rate", strconv.FormatFloat(rate, 'g', -1, 64))
			base := addr
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.ResponseHeaderTimeout = replayQuiet
			c, err := opsClient(&http.Client{Transport: tr}, tokenFile)
			if err != nil {
				return err
			}
			u := strings.TrimSuffix(base, "/") + broker.TriggersPath + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/replay?" + q.Encode()
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
				return fmt.Errorf("POST %s: %s: %s", req.URL.Path, resp.Status, strings.TrimSpace(string(msg)))
			}
			return followReplay(cmd.OutOrStdout(), resp.Body, trig)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address of the running sluice serve")
	cmd.Flags().StringVar(&tokenFile, "ops-token-file", "", "send the token in this file as Authorization: Bearer (the server's --ops-token-file)")
	cmd.Flags().StringVar(&trig, "trigger", "", "the trigger (or subscription) to replay, NAMESPACE/NAME")
	cmd.Flags().StringVar(&from, "from", "", "start of the window, an RFC 3339 time (required)")
	cmd.Flags().StringVar(&to, "to", "", "end of the window, an RFC 3339 time (default now)")
	cmd.Flags().Float64Var(&rate, "rate", broker.DefaultReplayRate, "events re-delivered a second at most (the trigger's sluice.dev/max-delivery-rate also applies)")
	_ = cmd.MarkFlagRequired("trigger")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

// followReplay prints the progress lines of a replay's answer and returns nil only for a
// complete replay.
func followReplay(out io.Writer, body io.Reader, trig string) error {
	lines := make(chan broker.ReplayProgress)
	ended := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 0, 4<<10), 64<<10)
		for sc.Scan() {
			var p broker.ReplayProgress
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				ended <- fmt.Errorf("a progress line: %w", err)
				return
			}
			select {
			case lines <- p:
			case <-stop:
				return
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		ended <- err
	}()
	var last broker.ReplayProgress
	quiet := time.NewTimer(replayQuiet)
	defer quiet.Stop()
	for {
		select {
		case p := <-lines:
			quiet.Reset(replayQuiet)
			last = p
			if !p.Done {
				fmt.Fprintf(out, "replay %s of %s: %d read, %d matched, %d re-delivered\n", p.ID, p.Trigger, p.Read, p.Matched, p.Delivered)
				continue
			}
			if p.Complete {
				_, err := fmt.Fprintf(out, "replay %s of %s: complete: %d events re-delivered (%d stored events read in the window)\n", p.ID, p.Trigger, p.Delivered, p.Read)
				return err
			}
			return fmt.Errorf("replay %s of %s incomplete: %d of %d matched events re-delivered: %s; the events stay stored: run the replay again to re-deliver the window", p.ID, p.Trigger, p.Delivered, p.Matched, p.Error)
		case err := <-ended:
			return lostReplay(trig, last, err)
		case <-quiet.C:
			return lostReplay(trig, last, fmt.Errorf("no progress for %s", replayQuiet))
		}
	}
}

// lostReplay is the error of a replay whose server went away before its last line.
func lostReplay(trig string, last broker.ReplayProgress, err error) error {
	return fmt.Errorf("replay %s of %s incomplete: the server went away (%w); at least %d events were re-delivered by then; the events stay stored: run the replay again to re-deliver the window",
		last.ID, trig, err, last.Delivered)
}
