package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/loadtest/agent"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/report"
)

// loadFlags are the flags `sluice load` and `sluice bench` share.
type loadFlags struct {
	target      string
	rate        float64
	duration    time.Duration
	pace        string
	ramp        string
	warmup      time.Duration
	data        string
	mode        string
	batchSize   int
	connections int
	timeout     time.Duration
	typ, source string
	run         string
	insecure    bool
	stdClient   bool
	headers     []string // --header "Name: value"
}

func (l *loadFlags) register(f *pflag.FlagSet) {
	f.StringVar(&l.target, "target", "", "CloudEvents endpoint to load (http:// or https://)")
	f.Float64Var(&l.rate, "rate", 1000, "requests per second (with --duration)")
	f.DurationVar(&l.duration, "duration", 10*time.Second, "how long to send at --rate")
	f.StringVar(&l.pace, "pace", "", "rate steps RATE:SECONDS,… (Knative's format), e.g. 1000:30,1200:30")
	f.StringVar(&l.ramp, "ramp", "", "log-spaced rate steps FROM:TO:STEP_SECONDS[:COUNT], e.g. 1000:20000:5")
	f.DurationVar(&l.warmup, "warmup", 0, "send at the first step's rate for this long first, without recording")
	f.StringVar(&l.data, "data", "", "event data: @FILE or the data itself (default: 2 KiB of JSON)")
	f.StringVar(&l.mode, "mode", "binary", "content mode: binary, structured or batch")
	f.IntVar(&l.batchSize, "batch-size", 10, "events per request in batch mode")
	f.IntVar(&l.connections, "connections", 256, "keep-alive connections = workers = max requests in flight")
	f.DurationVar(&l.timeout, "timeout", 30*time.Second, "per-request timeout")
	f.StringVar(&l.typ, "type", cevent.DefaultType, "CloudEvent type")
	f.StringVar(&l.source, "source", cevent.DefaultSource, "CloudEvent source")
	f.StringVar(&l.run, "run", "", "run id (sluicerun extension and ce-id prefix; default: random)")
	f.BoolVar(&l.insecure, "insecure", false, "skip TLS certificate verification (https targets)")
	f.BoolVar(&l.stdClient, "std-client", false, "send with Go's net/http client instead of the raw HTTP/1.1 sender")
	f.StringArrayVarP(&l.headers, "header", "H", nil, `extra request header "Name: value", e.g. "Authorization: Bearer $(cat token)" (repeatable)`)
}

// options turns the flags into load options (the caller sets Progress and Start).
func (l *loadFlags) options() (load.Options, error) {
	var o load.Options
	n := 0
	for _, s := range []string{l.pace, l.ramp} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return o, errors.New("use one of --rate/--duration, --pace or --ramp")
	}
	var p pacer.Pacer
	var first float64
	switch {
	case l.pace != "":
		s, err := pacer.ParsePace(l.pace)
		if err != nil {
			return o, fmt.Errorf("--pace: %w", err)
		}
		p, first = s, s[0].Rate
	case l.ramp != "":
		r, err := pacer.ParseRamp(l.ramp)
		if err != nil {
			return o, fmt.Errorf("--ramp: %w", err)
		}
		p, first = r, r.From
	default:
		if l.rate <= 0 || l.duration <= 0 {
			return o, errors.New("--rate and --duration must be positive")
		}
		p, first = pacer.Constant{Rate: l.rate, Duration: l.duration}, l.rate
	}
	if l.warmup > 0 {
		w := pacer.Warmup{Rate: first, Duration: l.warmup, Next: p}
		o.WarmupHits, o.Warmup = w.Hits(), l.warmup
		p = w
	}
	mode, err := cevent.ParseMode(l.mode)
	if err != nil {
		return o, err
	}
	data := defaultData
	if l.data != "" {
		if data, err = readData(l.data); err != nil {
			return o, err
		}
	}
	run := l.run
	if run == "" {
		run = newRunID()
	}
	t, err := cevent.NewTemplate(mode, l.typ, l.source, run, data, l.batchSize)
	if err != nil {
		return o, err
	}
	o.Target, o.Pacer, o.Template = l.target, p, t
	o.Connections, o.Timeout, o.Insecure, o.StdClient = l.connections, l.timeout, l.insecure, l.stdClient
	for _, h := range l.headers {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name+value, "\r\n") {
			return o, fmt.Errorf("--header %q: want \"Name: value\" on one line", h)
		}
		o.Header = append(o.Header, [2]string{name, value})
	}
	return o, nil
}

// defaultData is a 2,048-byte JSON payload, the size of the reference reports.
var defaultData = func() []byte {
	const n = 2048
	b := []byte(`{"data":"`)
	for len(b) < n-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}()

// readData reads "@FILE", or returns the argument itself.
func readData(arg string) ([]byte, error) {
	if name, ok := strings.CutPrefix(arg, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read data: %w", err)
		}
		return b, nil
	}
	if arg == "" {
		return nil, errors.New("no data: pass -d @FILE or the data itself")
	}
	return []byte(arg), nil
}

// newRunID returns 12 random lower-case hex digits.
func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// writeJSON writes v, indented, to name.
func writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// newLoadCmd is `sluice load`: the open-model load generator.
func newLoadCmd() *cobra.Command {
	var lf loadFlags
	var af agentFlags
	var output string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "load --target URL [--rate N --duration D | --pace R:S,… | --ramp FROM:TO:S]",
		Short: "Send CloudEvents at scheduled times (open model) and report latency like vegeta",
		Long: `load sends CloudEvents to any HTTP endpoint on a schedule and prints a vegeta-style
report with HDR percentiles (p99.9, p99.99).

It is an open-model generator: request n is due at start + due(n) whatever happened
to earlier requests, and latency is measured from that intended time. A target that
stalls therefore shows up as latency instead of as a quietly lower rate (no
coordinated omission). If the generator itself falls behind (all --connections busy,
or not enough CPU) the report says so, with the achieved and intended rates.

Schedules: --rate N --duration D (constant), --pace 1000:30,1200:30 (Knative's steps:
rate per second for so many seconds, in sequence), or --ramp FROM:TO:STEP_SECONDS
(log-spaced rates from FROM to TO, about ten steps per decade unless :COUNT is
given). --warmup D sends at the first rate for D first and leaves it out of the results.

Every event carries the extensions sluicerun (run id), sluiceseq (sequence number from
0) and sluicesent (intended send time, Unix nanoseconds), plus sluicewarmup=1 during
warm-up, so 'sluice receive' can compute end-to-end latency, loss and duplicates.
In batch mode each request carries --batch-size events and --rate counts requests.

A progress line is printed to stderr every second (--quiet turns it off). --output
saves the results as JSON: totals and per-second aggregates, not per-request records,
so memory and file size stay bounded however long the run.

Distributed runs: 'sluice load --agent --listen ADDR' serves an agent (run it on each
load machine); 'sluice load --agents ADDR1,ADDR2,…' with the usual flags is the
controller. Agent i of n sends hits i, i+n, … of the schedule (rate R/n each), all
from a common start time corrected for each agent's clock skew (estimated from
round trips, like NTP, and printed). The controller merges the agents' HDR
histograms and per-second series into one report of the same format, plus an agents
table; an agent that fails, or whose achieved rate falls more than
--agent-tolerance below its share, is named and makes the command exit non-zero.
An agent runs whatever schedule it is sent to whatever target: listen on a private
address only.`,
		Example: `  # 1,000 events/s for 30 s of the 2 KiB sample payload
  sluice load --target http://127.0.0.1:8080/demo/default --rate 1000 --duration 30s \
    --data @sample-ce-data.json

  # Knative's pace, after 10 s of warm-up, saving the results
  sluice load --target http://127.0.0.1:8080/demo/default --pace 1000:30,1200:30 \
    --warmup 10s --output results.json

  # find where a receiver breaks: 1k→20k events/s in 5 s steps
  sluice load --target http://127.0.0.1:9000/ --ramp 1000:20000:5

  # distributed: an agent on each of three machines, then the controller
  sluice load --agent --listen 10.0.0.11:7070      # on each agent machine
  sluice load --agents 10.0.0.11:7070,10.0.0.12:7070,10.0.0.13:7070 \
    --target http://10.0.0.10:8080/demo/default --rate 30000 --duration 60s -o run.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if af.agent {
				return runAgent(cmd, af.listen)
			}
			if af.agents != "" {
				return runController(cmd, lf, af, output)
			}
			if lf.target == "" {
				return errors.New(`required flag "target" not set`)
			}
			o, err := lf.options()
			if err != nil {
				return err
			}
			if !quiet {
				o.Progress = cmd.ErrOrStderr()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "load: %s → %s, run %s, %d connections\n", describe(o), o.Target, o.Template.Run, o.Connections)
			res, err := load.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if err := report.WriteLoad(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			if output != "" {
				return writeJSON(output, res)
			}
			return nil
		},
	}
	lf.register(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "save the results (totals, steps, per-second series) as JSON to this file")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress line on stderr")
	af.register(cmd.Flags())
	return cmd
}

func describe(o load.Options) string {
	if s, ok := o.Pacer.(fmt.Stringer); ok {
		return s.String()
	}
	return "schedule"
}

// agentFlags are the flags of distributed `sluice load`.
type agentFlags struct {
	agent     bool
	listen    string
	agents    string
	tolerance float64
}

func (a *agentFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&a.agent, "agent", false, "run as a load agent: serve the agent API on --listen and run the schedules a controller sends")
	f.StringVar(&a.listen, "listen", "127.0.0.1:7070", "agent API address (with --agent)")
	f.StringVar(&a.agents, "agents", "", "run as controller: split the schedule across these agents, ADDR1,ADDR2,…")
	f.Float64Var(&a.tolerance, "agent-tolerance", agent.DefaultTolerance, "fail an agent whose achieved rate falls more than this fraction below its share")
}

// spec turns the flags into an agent run spec.
func (l *loadFlags) spec() (agent.Spec, error) {
	s := agent.Spec{Target: l.target, Rate: l.rate, Duration: l.duration, Pace: l.pace, Ramp: l.ramp,
		Warmup: l.warmup, Mode: l.mode, BatchSize: l.batchSize, Connections: l.connections, Timeout: l.timeout,
		Type: l.typ, Source: l.source, Run: l.run, Insecure: l.insecure, StdClient: l.stdClient, Headers: l.headers}
	if l.data != "" {
		d, err := readData(l.data)
		if err != nil {
			return s, err
		}
		s.Data = d
	}
	if s.Run == "" {
		s.Run = newRunID()
	}
	return s, nil
}

// optionsFromSpec builds load options from an agent run spec with the flag parser.
func optionsFromSpec(s agent.Spec) (load.Options, error) {
	l := loadFlags{target: s.Target, rate: s.Rate, duration: s.Duration, pace: s.Pace, ramp: s.Ramp,
		warmup: s.Warmup, mode: s.Mode, batchSize: s.BatchSize, connections: s.Connections, timeout: s.Timeout,
		typ: s.Type, source: s.Source, run: s.Run, insecure: s.Insecure, stdClient: s.StdClient, headers: s.Headers}
	if len(s.Data) > 0 {
		l.data = string(s.Data)
		if strings.HasPrefix(l.data, "@") {
			return load.Options{}, errors.New("data: an agent does not read files; the controller sends the bytes")
		}
	}
	if s.Run == "" {
		return load.Options{}, errors.New("run_id: required")
	}
	o, err := l.options()
	if err != nil {
		return o, err
	}
	if u, err := url.Parse(o.Target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return o, fmt.Errorf("target %q: want an http:// or https:// URL", o.Target)
	}
	o.ShareIndex, o.ShareOf, o.StartAt = s.ShareIndex, s.ShareOf, s.StartAt
	return o, nil
}

// runAgent serves the agent API until the command's context ends.
func runAgent(cmd *cobra.Command, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	a := agent.New(cmd.Context(), optionsFromSpec)
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: time.Minute}
	fmt.Fprintf(cmd.ErrOrStderr(), "load agent: listening on %s\n", ln.Addr())
	served := make(chan error, 1) // Serve's end: waited for before returning
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("agent: %w", err)
	case <-cmd.Context().Done():
	}
	// Let requests under way finish for 5 s, then close their connections: nothing of
	// the server outlives the command.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// runController splits the schedule across the agents and prints the merged report.
func runController(cmd *cobra.Command, lf loadFlags, af agentFlags, output string) error {
	if lf.target == "" {
		return errors.New(`required flag "target" not set`)
	}
	o, err := lf.options() // validate here, before any agent is asked
	if err != nil {
		return err
	}
	spec, err := lf.spec()
	if err != nil {
		return err
	}
	spec.Run = o.Template.Run
	var addrs []string
	for _, a := range strings.Split(af.agents, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if af.tolerance < 0 || af.tolerance >= 1 {
		return errors.New("--agent-tolerance must be in [0, 1)")
	}
	c := &agent.Controller{Agents: addrs, Tolerance: af.tolerance, Progress: cmd.ErrOrStderr()}
	total := o.Warmup
	p := o.Pacer
	if w, ok := p.(pacer.Warmup); ok {
		p = w.Next
	}
	if st, ok := p.(pacer.Stepper); ok {
		for _, x := range st.Steps() {
			total += x.Duration
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "load: %s → %s, run %s, %d agents\n", describe(o), o.Target, spec.Run, len(addrs))
	m, err := c.Run(cmd.Context(), spec, total+lf.timeout+time.Minute)
	if err != nil {
		return err
	}
	if m.Result != nil {
		if err := report.WriteLoad(cmd.OutOrStdout(), m.Result); err != nil {
			return err
		}
	}
	if err := agent.WriteAgents(cmd.OutOrStdout(), m.Agents); err != nil {
		return err
	}
	if output != "" && m.Result != nil {
		if err := writeJSON(output, m); err != nil {
			return err
		}
	}
	if bad := m.Failed(); len(bad) > 0 {
		names := make([]string, len(bad))
		for i, a := range bad {
			names[i] = a.Addr
		}
		return fmt.Errorf("%d of %d agents failed or fell behind: %s", len(bad), len(addrs), strings.Join(names, ", "))
	}
	return nil
}
