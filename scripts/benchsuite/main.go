// Command benchsuite is `make bench`: the whole-system benchmark of Sluice on one
// machine. For each scenario (direct, memory, fanout, filter, jetstream, kafka) it
// starts `sluice serve` with a generated Knative config on 127.0.0.1, finds the highest
// sustained rate with an adaptive ramp of constant-rate steps (load generator and
// receivers in this process, as `sluice bench` runs them), measures latency at half
// that rate, samples the broker's CPU and peak RSS from /proc, then runs the overload
// scenario (twice the memory broker's sustained rate). It writes results.json, one
// report directory per scenario (summary and PNG plots) and renders README.md with
// the machine, the table and every target marked met or not.
//
//	go run ./scripts/benchsuite                       # full run, ~15 minutes
//	go run ./scripts/benchsuite --quick --out /tmp/b  # smoke run
//	go run ./scripts/benchsuite --scenarios direct,memory
//
// Child processes run in their own process group and are killed on exit, on SIGINT
// or SIGTERM, and (Pdeathsig) if this process dies.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/report"
)

// options are the command-line flags.
type options struct {
	quick     bool
	scenarios []string
	out       string
	sluice    string
	data      string
	kafka     string // SLUICE_KAFKA_BROKERS
}

// suite holds what every scenario run needs.
type suite struct {
	o       options
	p       plan
	tmp     string
	data    []byte
	results string // out/results
	logf    func(format string, args ...any)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchsuite:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	var scen string
	flag.BoolVar(&o.quick, "quick", false, "short steps and runs: a smoke test in well under a minute per scenario")
	flag.StringVar(&scen, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ","))
	flag.StringVar(&o.out, "out", "docs/benchmarks", "output directory: README.md and results/ are written there")
	flag.StringVar(&o.sluice, "sluice", "", "sluice binary to run (default: build ./cmd/sluice into bin/sluice first)")
	flag.StringVar(&o.data, "data", "testdata/sample-ce-data.json", "event data file (2 KiB JSON)")
	flag.Parse()
	o.kafka = os.Getenv("SLUICE_KAFKA_BROKERS")
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, ok := scenarioByName(s); !ok && s != scOverload {
			return fmt.Errorf("--scenarios: unknown scenario %q (want %s)", s, strings.Join(allScenarios, ","))
		}
		o.scenarios = append(o.scenarios, s)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	limit := 45 * time.Minute
	if o.quick {
		limit = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	s := &suite{o: o, p: fullPlan, logf: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", a...)
	}}
	if o.quick {
		s.p = quickPlan
	}
	var err error
	if s.data, err = os.ReadFile(o.data); err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	if o.sluice == "" {
		s.logf("building bin/sluice")
		b := exec.CommandContext(ctx, "go", "build", "-o", "bin/sluice", "./cmd/sluice")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/sluice: %w", err)
		}
		o.sluice = "bin/sluice"
	}
	if s.o.sluice, err = filepath.Abs(o.sluice); err != nil {
		return err
	}
	if s.tmp, err = os.MkdirTemp("", "benchsuite-"); err != nil {
		return err
	}
	defer os.RemoveAll(s.tmp)
	s.results = filepath.Join(o.out, "results")
	if err := os.RemoveAll(s.results); err != nil {
		return err
	}
	if err := os.MkdirAll(s.results, 0o755); err != nil {
		return err
	}

	r := &results{Machine: describeMachine(), Command: commandLine(), Quick: o.quick, Commit: gitCommit(),
		Started: time.Now(), Criteria: defaultCriteria, Plan: s.p, LoadAvg: map[string]string{"start": loadAvg()}}
	for _, name := range o.scenarios {
		if ctx.Err() != nil {
			break
		}
		if name == scOverload {
			r.Overload = s.overload(ctx, r.find(scMemory))
			continue
		}
		sc, _ := scenarioByName(name)
		r.Scenarios = append(r.Scenarios, s.scenario(ctx, sc))
	}
	if ctx.Err() != nil {
		r.Notes = append(r.Notes, "the run was interrupted ("+context.Cause(ctx).Error()+"): results are partial")
	}
	r.Finished = time.Now()
	r.LoadAvg["end"] = loadAvg()
	r.Verdicts = verdicts(r)
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.results, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeREADME(filepath.Join(o.out, "README.md"), r); err != nil {
		return err
	}
	s.logf("wrote %s and %s", filepath.Join(o.out, "README.md"), filepath.Join(s.results, "results.json"))
	for _, v := range r.Verdicts {
		s.logf("%-8s %s: %s%s", v.Status, v.Target, v.Measured, v.Why)
	}
	return nil
}

// primeDuration is the length of the unrecorded run each broker gets before its ramp.
const primeDuration = 3 * time.Second

// plans: full (the committed run) and quick (smoke).
var (
	fullPlan = plan{Step: 4 * time.Second, StepWarmup: time.Second, Settle: 5 * time.Second,
		Half: 15 * time.Second, Overload: 60 * time.Second, Coarse: 1.5, Fine: 1.1, MaxSteps: 14}
	quickPlan = plan{Step: time.Second, StepWarmup: 500 * time.Millisecond, Settle: 2 * time.Second,
		Half: 2 * time.Second, Overload: 4 * time.Second, Coarse: 2, Fine: 0, MaxSteps: 4}
)

// scenario ramps one scenario and measures latency at half its sustained rate.
func (s *suite) scenario(ctx context.Context, sc scenario) scenarioResult {
	sr := scenarioResult{scenario: sc, Sustained: -1}
	var extra []string
	switch sc.Channel {
	case "jetstream":
		extra = append(extra, "--channel", "jetstream", "--data-dir", filepath.Join(s.tmp, sc.Name, "data"))
	case "kafka":
		if s.o.kafka == "" {
			sr.NotRun = "SLUICE_KAFKA_BROKERS is not set (start Kafka with `eval \"$(scripts/kafka.sh start)\"`)"
			return sr
		}
		extra = append(extra, "--channel", "kafka", "--kafka-brokers", s.o.kafka)
	}
	rcv, err := freeAddrs(max(sc.Matching, 1))
	if err != nil {
		sr.Error = err.Error()
		return sr
	}
	t := target{Receivers: rcv, Data: s.data}
	if sc.Channel != "" {
		dir := filepath.Join(s.tmp, sc.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			sr.Error = err.Error()
			return sr
		}
		urls := make([]string, len(rcv))
		for i, a := range rcv {
			urls[i] = "http://" + a + "/"
		}
		cfg := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(cfg, []byte(brokerConfig(sc, sc.Name+"-"+newRunID()[:6], urls)), 0o644); err != nil {
			sr.Error = err.Error()
			return sr
		}
		b, err := startBroker(ctx, s.o.sluice, dir, cfg, extra...)
		if err != nil {
			if sc.Channel != "memory" {
				sr.NotRun = "sluice serve did not start: " + lastPart(firstLine(err.Error()))
			} else {
				sr.Error = err.Error()
			}
			s.logf("%s: %s%s", sc.Name, sr.NotRun, sr.Error)
			return sr
		}
		defer b.Stop()
		t.URL, t.Broker = b.ingest, b
	}
	// Prime the broker (connections, consumer groups, JIT-free but lazy paths) with a
	// short unrecorded run, so the first ramp step measures steady state.
	if t.Broker != nil {
		if _, _, err := runStep(ctx, t, stepSpec{Rate: sc.StartRate / 2, Duration: primeDuration, Settle: s.p.Settle}); err != nil {
			sr.Error = "priming run: " + err.Error()
			return sr
		}
	}
	s.logf("%s: ramp from %.0f events/s", sc.Name, sc.StartRate)
	rp := rampPlan{Start: sc.StartRate, Coarse: s.p.Coarse, Fine: s.p.Fine, MaxRate: 100000, MaxSteps: s.p.MaxSteps, Floor: 8}
	for ctx.Err() == nil {
		rate, done := nextRate(sr.Steps, rp)
		if done {
			break
		}
		st, _, err := runStep(ctx, t, stepSpec{Rate: rate, Duration: s.p.Step, Warmup: s.p.StepWarmup, Settle: s.p.Settle})
		if err != nil {
			sr.Error = err.Error()
			break
		}
		st.Pass, st.Why = judge(st, defaultCriteria)
		s.logf("%s: %6.0f/s sent %6.0f/s ok %.3f%% lost %d pub p99 %.1fms e2e p99 %.1fms cpu %.0fµs/ev → %v %s",
			sc.Name, rate, st.Rate, 100*st.Success, st.Lost, st.Publish.P99, st.E2E.P99, st.CPUPerEventUS, st.Pass, st.Why)
		sr.Steps = append(sr.Steps, st)
		if t.Broker != nil && !t.Broker.Alive() {
			sr.Error = "the broker died during the ramp: " + t.Broker.logTail()
			break
		}
		if !st.Pass { // let a backlog drain before the next, lower step
			sleepCtx(ctx, s.p.Settle)
		}
	}
	sr.Sustained = sustained(sr.Steps)
	dir := filepath.Join(s.results, sc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		sr.Error = err.Error()
		return sr
	}
	if st := sr.sustainedStep(); st != nil && ctx.Err() == nil && sr.Error == "" {
		half := float64(int(st.IntendedRate/2 + 0.5))
		s.logf("%s: sustained %.0f/s; latency run at %.0f/s for %s", sc.Name, st.IntendedRate, half, s.p.Half)
		hs, res, err := runStep(ctx, t, stepSpec{Rate: half, Duration: s.p.Half, Warmup: 2 * s.p.StepWarmup, Settle: s.p.Settle})
		if err != nil {
			sr.Error = err.Error()
		} else {
			hs.Pass, hs.Why = judge(hs, defaultCriteria)
			sr.Half = &hs
			s.logf("%s: half: pub p50/p99/p99.9 %.2f/%.2f/%.2f ms, e2e %.2f/%.2f/%.2f ms, lost %d",
				sc.Name, hs.Publish.P50, hs.Publish.P99, hs.Publish.P999, hs.E2E.P50, hs.E2E.P99, hs.E2E.P999, hs.Lost)
			if err := writeReport(dir, sc.Title+" at 50% of sustained", res); err != nil {
				sr.Error = err.Error()
			}
			sr.ReportDir = "results/" + sc.Name
		}
	}
	if names, err := rampPlots(dir, &sr); err != nil {
		sr.Error = err.Error()
	} else {
		sr.RampPlots = names
		sr.ReportDir = "results/" + sc.Name
	}
	if t.Broker != nil {
		if hwm, err := t.Broker.HWM(); err == nil {
			sr.PeakRSS = hwm
		}
	}
	return sr
}

// overload runs twice the memory broker's sustained rate at a fresh memory broker.
func (s *suite) overload(ctx context.Context, mem *scenarioResult) *overloadResult {
	if mem == nil || mem.sustainedStep() == nil {
		return &overloadResult{NotRun: "needs the memory scenario's sustained rate (run it first, in the same --scenarios list)"}
	}
	sc, _ := scenarioByName(scMemory)
	rcv, err := freeAddrs(1)
	if err != nil {
		return &overloadResult{Error: err.Error()}
	}
	dir := filepath.Join(s.tmp, scOverload)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &overloadResult{Error: err.Error()}
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(brokerConfig(sc, "overload", []string{"http://" + rcv[0] + "/"})), 0o644); err != nil {
		return &overloadResult{Error: err.Error()}
	}
	b, err := startBroker(ctx, s.o.sluice, dir, cfg)
	if err != nil {
		return &overloadResult{Error: err.Error()}
	}
	defer b.Stop()
	rate := mem.SustainedRate()
	s.logf("overload: %.0f/s (2 × %.0f) for %s", 2*rate, rate, s.p.Overload)
	settle := 30 * time.Second
	if s.o.quick {
		settle = 10 * time.Second
	}
	o, res, err := runOverload(ctx, target{URL: b.ingest, Receivers: rcv, Broker: b, Data: s.data}, rate, s.p.Overload, settle)
	if err != nil {
		return &overloadResult{Error: err.Error(), SustainedRate: rate, Rate: 2 * rate}
	}
	out := filepath.Join(s.results, scOverload)
	if err := writeReport(out, "overload: 2 × the memory broker's sustained rate", res); err != nil {
		o.Error = err.Error()
	}
	o.ReportDir = "results/" + scOverload
	s.logf("overload: %d requests, %d accepted, %d × 429, %d × 503, lost %d, delivery %.0f/s, RSS %.1f MiB, probe 429 p99 %.2f ms, alive %v",
		o.Requests, o.Accepted, o.Rejected429, o.Rejected503, o.Lost, o.DeliveryRate, float64(o.PeakRSS)/mib, o.ProbeRejectP99MS, o.Alive)
	return o
}

// writeReport writes a `sluice bench` report directory for res and keeps only the
// summary and the PNG plots (results.json, seconds.csv and index.html would repeat them
// at several times the size).
func writeReport(dir, label string, res *bench.Result) error {
	if err := report.WriteDir(dir, &report.Saved{Result: res, Label: label, Finished: time.Now()}); err != nil {
		return err
	}
	for _, f := range []string{report.ResultsFile, report.SecondsFile, report.HTMLFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// freeAddrs returns n distinct free 127.0.0.1 ports.
func freeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// lastPart is the innermost message of a chain "a: b: c" → "c".
func lastPart(s string) string {
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// commandLine is how this run was invoked.
func commandLine() string {
	args := append([]string{"go run ./scripts/benchsuite"}, os.Args[1:]...)
	return strings.Join(args, " ")
}
