package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Controller defaults.
const (
	// StartLead is how far ahead of the start requests the common start time is set,
	// leaving the agents time to open their connections.
	StartLead = 3 * time.Second
	// SkewSamples is how many /time round trips estimate each agent's clock offset;
	// the one with the shortest round trip is kept.
	SkewSamples = 5
	// DefaultTolerance is how far below its share of the rate an agent may fall before
	// the run fails: 1 − load.KeptRate.
	DefaultTolerance = 0.05
	// maxAnswerBytes bounds what the controller reads from an agent.
	maxAnswerBytes = 64 << 20
)

// Controller runs one schedule across agents.
type Controller struct {
	Agents    []string // host:port of each agent
	Tolerance float64  // achieved rate may fall this fraction below the share (default DefaultTolerance)
	Client    *http.Client
	Progress  io.Writer // if set, one line per agent event
}

// AgentReport is one agent's part of a distributed run.
type AgentReport struct {
	Addr         string        `json:"addr"`
	Share        string        `json:"share"`   // "i/n": hits n with n mod n = i
	Skew         time.Duration `json:"skew_ns"` // agent clock − controller clock
	RTT          time.Duration `json:"rtt_ns"`  // round trip of the skew sample kept
	Requests     uint64        `json:"requests"`
	IntendedRate float64       `json:"intended_rate"`
	Rate         float64       `json:"rate"`
	Behind       bool          `json:"behind,omitempty"` // achieved rate below the share by more than the tolerance
	Error        string        `json:"error,omitempty"`
}

// Failed reports whether the agent failed or fell behind.
func (a AgentReport) Failed() bool { return a.Error != "" || a.Behind }

// Run asks every agent to run its share of spec (ShareIndex, ShareOf and StartAt are
// set here), waits for them and merges their results. The merged result is nil only
// when no agent returned one. Agents that failed or fell behind are marked in the
// reports; the caller decides the exit status.
func (c *Controller) Run(ctx context.Context, spec Spec, wait time.Duration) (*Merged, error) {
	if len(c.Agents) == 0 {
		return nil, fmt.Errorf("--agents: no agent address")
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 30 * time.Second}
	}
	tol := c.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	reps := make([]AgentReport, len(c.Agents))
	for i, addr := range c.Agents {
		reps[i] = AgentReport{Addr: addr, Share: fmt.Sprintf("%d/%d", i, len(c.Agents))}
		skew, rtt, err := c.skew(ctx, addr)
		if err != nil {
			reps[i].Error = err.Error()
			continue
		}
		reps[i].Skew, reps[i].RTT = skew, rtt
		c.logf("agent %s: clock skew %v (round trip %v)\n", addr, skew.Round(time.Microsecond), rtt.Round(time.Microsecond))
	}
	start := time.Now().Add(StartLead)
	started := make([]bool, len(c.Agents))
	defer func() { c.stopUnfinished(ctx, started) }()
	for i, addr := range c.Agents {
		if reps[i].Error != "" {
			continue
		}
		s := spec
		s.ShareIndex, s.ShareOf, s.StartAt = i, len(c.Agents), start.Add(reps[i].Skew)
		if err := c.call(ctx, http.MethodPost, addr, "/run", s, http.StatusAccepted, nil); err != nil {
			reps[i].Error = err.Error()
			continue
		}
		started[i] = true
	}
	deadline := time.Now().Add(StartLead + wait)
	results := make([]*Result, len(c.Agents))
	for i, addr := range c.Agents {
		if reps[i].Error != "" {
			continue
		}
		r, err := c.await(ctx, addr, deadline)
		if err != nil {
			reps[i].Error = err.Error()
			continue
		}
		results[i], started[i] = r, false
		reps[i].Requests, reps[i].IntendedRate, reps[i].Rate = r.Requests, r.IntendedRate, r.Rate
		reps[i].Behind = r.IntendedRate > 0 && r.Rate < (1-tol)*r.IntendedRate
	}
	for _, r := range reps {
		switch {
		case r.Error != "":
			c.logf("agent %s failed: %s\n", r.Addr, r.Error)
		case r.Behind:
			c.logf("agent %s fell behind: %.1f/s of its share %.1f/s\n", r.Addr, r.Rate, r.IntendedRate)
		}
	}
	m := &Merged{Agents: reps}
	var ok []*Result
	for _, r := range results {
		if r != nil {
			ok = append(ok, r)
		}
	}
	if len(ok) > 0 {
		m.Result = Merge(ok)
	}
	return m, nil
}

// stopTimeout bounds the stop sent to an agent whose result the controller gave up on.
const stopTimeout = 5 * time.Second

// stopUnfinished asks each agent marked in started (its run was started and its result
// not read: the controller was stopped, or it waited past the deadline) to end its run,
// so that no load outlives the controller.
func (c *Controller) stopUnfinished(ctx context.Context, started []bool) {
	for i, addr := range c.Agents {
		if !started[i] {
			continue
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		if err := c.call(sctx, http.MethodPost, addr, "/stop", nil, http.StatusOK, nil); err != nil {
			c.logf("agent %s: stopping its run: %v\n", addr, err)
		}
		cancel()
	}
}

// skew estimates addr's clock offset NTP-style: offset = agent time − midpoint of
// the round trip, from the sample with the shortest round trip.
func (c *Controller) skew(ctx context.Context, addr string) (skew, rtt time.Duration, err error) {
	rtt = -1
	for range SkewSamples {
		var ans struct {
			Now int64 `json:"now_ns"`
		}
		t0 := time.Now()
		if err := c.call(ctx, http.MethodGet, addr, "/time", nil, http.StatusOK, &ans); err != nil {
			return 0, 0, err
		}
		t3 := time.Now()
		if d := t3.Sub(t0); rtt < 0 || d < rtt {
			rtt = d
			mid := t0.Add(d / 2)
			skew = time.Unix(0, ans.Now).Sub(mid)
		}
	}
	return skew, rtt, nil
}

// await polls addr's status until its run ends, then fetches the result.
func (c *Controller) await(ctx context.Context, addr string, deadline time.Time) (*Result, error) {
	for {
		var st Status
		if err := c.call(ctx, http.MethodGet, addr, "/status", nil, http.StatusOK, &st); err != nil {
			return nil, err
		}
		switch st.State {
		case StateDone:
			var r Result
			if err := c.call(ctx, http.MethodGet, addr, "/result", nil, http.StatusOK, &r); err != nil {
				return nil, err
			}
			if err := r.decode(); err != nil {
				return nil, fmt.Errorf("result: %w", err)
			}
			return &r, nil
		case StateFailed:
			return nil, fmt.Errorf("run failed: %s", st.Error)
		case StateRunning:
		default:
			return nil, fmt.Errorf("unexpected state %q", st.State)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("still running at the deadline %s", deadline.Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the result: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// call sends a JSON request to http://addr/path and decodes the answer into out.
func (c *Controller) call(ctx context.Context, method, addr, path string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	req, err := http.NewRequestWithContext(ctx, method, url+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

func (c *Controller) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format, args...)
	}
}
