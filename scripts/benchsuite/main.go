// Command benchsuite is `make bench`: the whole-system benchmark of Sluice on one
// machine. For each scenario (direct, memory, fanout, filter, jetstream, kafka) it
// starts `sluice serve` with a generated Knative config on 127.0.0.1, finds the highest
// sustained rate with the search `sluice bench --find-max` runs (loadtest/bench's rate
// controller: constant-rate steps, doubling, then bisecting; load generator and
// receivers in this process, as `sluice bench` runs them), measures latency at half
// that rate, samples the broker's CPU and peak RSS from /proc, then runs batched
// delivery at N = 1, 10 and 100 events per POST (batch), the overload scenario (2× and
// 4× each channel's sustained rate) and the nginx floor. It writes results.json, one
// report directory per scenario (summary and PNG plots), renders README.md with
// the machine, the table and every target marked met or not, and rewrites the
// performance table of the repository's README.md between its bench-table markers
// (--readme; not on a --quick run).
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
	"runtime"
	"strconv"
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
	pin       bool
	readme    string // the file whose performance table the run rewrites ("": none)
}

// suite holds what every scenario run needs.
type suite struct {
	o       options
	p       plan
	tmp     string
	data    []byte
	results string // out/results
	pinned  bool   // brokers on CPU 1, this process on CPU 0
	logf    func(format string, args ...any)
}

func main() {
	asHealthProbeChild() // healthproc.go
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
	flag.StringVar(&o.out, "out", defaultOut, "output directory: README.md and results/ are written there")
	flag.StringVar(&o.sluice, "sluice", "", "sluice binary to run (default: build ./cmd/sluice into bin/sluice first)")
	flag.BoolVar(&o.pin, "pin", runtime.NumCPU() >= 2, "pinned layout: brokers on CPU 1 (taskset -c 1), generator and receivers on CPU 0 (needs 2 CPUs; the floor scenario reports both layouts whatever this says)")
	flag.StringVar(&o.data, "data", "testdata/sample-ce-data.json", "event data file (2 KiB JSON)")
	flag.StringVar(&o.readme, "readme", "README.md", "file whose performance table, between the markers "+tableBegin+" and "+tableEnd+", is rewritten from the results (default README.md only when --out is the default "+defaultOut+"; empty: none; a --quick run leaves it alone)")
	rerender := flag.Bool("rerender", false, "only re-judge <out>/results/results.json and rewrite <out>/README.md and --readme's table (no runs)")
	flag.Parse()
	readmeSet := false
	flag.Visit(func(f *flag.Flag) { readmeSet = readmeSet || f.Name == "readme" })
	o.readme = readmeTarget(o.out, o.readme, readmeSet)
	if *rerender {
		return rerenderREADME(o.out, o.readme)
	}
	if o.readme != "" && !o.quick {
		if err := checkReadmeTable(o.readme); err != nil {
			return err
		}
	}
	o.kafka = os.Getenv("SLUICE_KAFKA_BROKERS")
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, ok := scenarioByName(s); !ok && s != scBatch && s != scOverload && s != scFloor {
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
	if o.pin {
		if runtime.NumCPU() < 2 {
			return fmt.Errorf("--pin needs 2 CPUs; this machine has %d", runtime.NumCPU())
		}
		if _, err := pinSelf(true); err != nil {
			return err
		}
		s.pinned = true
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
		Started: time.Now(), Pinned: s.pinned, Criteria: defaultCriteria, Plan: s.p, LoadAvg: map[string]string{"start": loadAvg()}}
	for _, name := range o.scenarios {
		if ctx.Err() != nil {
			break
		}
		switch name {
		case scOverload:
			r.Overloads = s.overload(ctx, r)
			continue
		case scFloor:
			r.Floor = s.floor(ctx)
			continue
		case scBatch:
			r.Batch = s.batch(ctx, r.find(scMemory))
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
	if o.readme != "" {
		skipped, err := writeReadmeTable(o.readme, filepath.Join(o.out, "README.md"), r)
		if err != nil {
			return err
		}
		if skipped != "" {
			s.logf("%s", skipped)
		} else {
			s.logf("rewrote the performance table of %s", o.readme)
		}
	}
	for _, v := range r.Verdicts {
		s.logf("%-8s %s: %s%s", v.Status, v.Target, v.Measured, v.Why)
	}
	return nil
}

// rerenderREADME re-judges a saved results.json with this build's verdicts and rewrites
// the README beside it and, unless readme is "", the performance table in readme.
func rerenderREADME(out, readme string) error {
	if readme != "" {
		if err := checkReadmeTable(readme); err != nil {
			return err
		}
	}
	js, err := os.ReadFile(filepath.Join(out, "results", "results.json"))
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(js, &r); err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	r.Verdicts = verdicts(&r)
	if js, err = json.MarshalIndent(&r, "", "  "); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results", "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeREADME(filepath.Join(out, "README.md"), &r); err != nil {
		return err
	}
	if readme == "" {
		return nil
	}
	skipped, err := writeReadmeTable(readme, filepath.Join(out, "README.md"), &r)
	if skipped != "" {
		fmt.Fprintln(os.Stderr, "benchsuite:", skipped)
	}
	return err
}

// primeDuration is the length of the unrecorded run each broker gets before its ramp.
const primeDuration = 3 * time.Second

// plans: full (the committed run) and quick (smoke).
var (
	fullPlan = plan{Step: 4 * time.Second, StepWarmup: time.Second, Settle: 5 * time.Second,
		Half: 15 * time.Second, Overload: 10 * time.Second, Reference: 8 * time.Second, Pairs: 3, Capacity: 12 * time.Second,
		Precision: 0.1, MaxSteps: 14}
	quickPlan = plan{Step: time.Second, StepWarmup: 500 * time.Millisecond, Settle: 2 * time.Second,
		Half: 2 * time.Second, Overload: 3 * time.Second, Reference: 2 * time.Second, Pairs: 3, Capacity: 3 * time.Second,
		Precision: 1, MaxSteps: 4}
)

// scenario ramps one scenario and measures latency at half its sustained rate.
func (s *suite) scenario(ctx context.Context, sc scenario) scenarioResult {
	sr := scenarioResult{scenario: sc, Sustained: -1}
	extra, why := s.channelFlags(sc, filepath.Join(s.tmp, sc.Name))
	if why != "" {
		sr.NotRun = why
		return sr
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
		b, err := startBroker(ctx, s.o.sluice, dir, cfg, s.pinned, extra...)
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
	var err2 error
	if sr.Steps, sr.FindMax, err2 = s.ramp(ctx, t, sc); err2 != nil {
		sr.Error = err2.Error()
	}
	if t.Broker != nil && !t.Broker.Alive() {
		sr.Error = "the broker died during the ramp: " + t.Broker.logTail()
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

// overloadBacklog is the --max-backlog of the overload runs' brokers: a durable channel
// has no byte budget, so without a bound its ingress would take every event and the CPU
// delivery needs (docs/decisions/0007-backlog-bound.md). It is a few hundred milliseconds of delivery here:
// a larger backlog keeps the heap near the memory limit's goal under overload, so GC
// takes CPU from delivery (20,000 until 2026-11-23; docs/decisions/0007-backlog-bound.md has both).
const overloadBacklog = 5000

// overloadMaxStoring is the --max-storing of a channel's overload brokers (0: not set).
// With 2,048 connections a durable channel otherwise has about as many publishes
// awaiting acknowledgement at once, and in A/B runs both delivered less under overload
// than with a bound (not yet seen in make bench). Kafka's acknowledgements take
// milliseconds, so it needs hundreds in flight (a low bound capped its ingress).
// docs/decisions/0008-max-storing.md has the measurements.
func overloadMaxStoring(channel string) int {
	switch channel {
	case scJetStream:
		return 128
	case scKafka:
		return 1024
	}
	return 0
}

// overloads are the overload runs: factor × sustained over that many connections.
var overloads = []struct {
	factor float64
	conns  int
}{{2, 256}, {4, 2048}}

// overload runs every overload (2× and 4× the channel's sustained rate) for each
// channel scenario that ran, each at a fresh broker.
func (s *suite) overload(ctx context.Context, r *results) []*overloadResult {
	var out []*overloadResult
	for _, ch := range []string{scMemory, scJetStream, scKafka} {
		for _, ov := range overloads {
			if ctx.Err() != nil {
				return out
			}
			o := s.overloadOne(ctx, r.find(ch), r.find(scMemory).SustainedRate(), ch, ov.factor, ov.conns)
			o.Channel, o.Factor, o.Connections = ch, ov.factor, ov.conns
			out = append(out, o)
		}
	}
	return out
}

// overloadOne runs factor × the sustained rate of the channel scenario sr at a fresh
// broker of that channel: the larger of sr's ramp and the capacity measured at that
// broker after its priming run (capacity.go). memory is the memory scenario's sustained
// rate (0 if it has none), which sets the capacity step's rate.
func (s *suite) overloadOne(ctx context.Context, sr *scenarioResult, memory float64, name string, factor float64, conns int) *overloadResult {
	if sr == nil || sr.sustainedStep() == nil {
		return &overloadResult{NotRun: "needs the " + name + " scenario's sustained rate (run it first, in the same --scenarios list)"}
	}
	sc := sr.scenario
	dir := filepath.Join(s.tmp, fmt.Sprintf("overload-%s-%.0f", name, factor))
	extra, why := s.channelFlags(sc, dir)
	if why != "" {
		return &overloadResult{NotRun: why}
	}
	extra = append(extra, "--max-backlog", strconv.Itoa(overloadBacklog))
	if n := overloadMaxStoring(name); n > 0 {
		extra = append(extra, "--max-storing", strconv.Itoa(n))
	}
	rcv, err := freeAddrs(1)
	if err != nil {
		return &overloadResult{Error: err.Error()}
	}
	b, err := startScenarioBroker(ctx, s.o.sluice, sc, dir, "overload-"+newRunID()[:6], rcv, s.pinned, extra...)
	if err != nil {
		return &overloadResult{Error: err.Error()}
	}
	defer b.Stop()
	t := target{URL: b.ingest, Receivers: rcv, Broker: b, Data: s.data}
	if _, _, err := runStep(ctx, t, stepSpec{Rate: sc.StartRate / 2, Duration: primeDuration, Settle: s.p.Settle}); err != nil {
		return &overloadResult{Error: "priming run: " + err.Error()}
	}
	settle := 30 * time.Second
	if s.o.quick {
		settle = 10 * time.Second
	}
	ramp := sr.SustainedRate()
	capRate := capacityStepRate(name, ramp, memory)
	s.logf("overload %s: capacity step at %.0f/s over %d connections for %s", name, capRate, capacityConns, s.p.Capacity)
	c := measureCapacity(ctx, t, capRate, s.p.Capacity, settle)
	rate, from := fairSustained(ramp, c)
	s.logf("overload %s: capacity %.0f/s (%d refused, lost %d%s); ramp sustained %.0f/s; using %s: %.0f/s × %.0f over %d connections for %s",
		name, c.Delivery, c.Refused, c.Lost, c.Error, ramp, from, rate, factor, conns, s.p.Overload)
	o, res, err := runPairs(ctx, t, rate, factor, conns, s.p, settle, func(i int, p overloadPair) {
		s.logf("overload %s %.0f× pair %d: reference %.0f ev/s, overload %.0f ev/s: %.2f×", name, factor, i+1, p.Reference.Delivery, p.Delivery, p.Ratio)
	})
	if err != nil {
		return &overloadResult{Error: err.Error(), SustainedRate: rate, SustainedFrom: from, RampSustainedRate: ramp, Capacity: c, Rate: factor * rate}
	}
	o.SustainedFrom, o.RampSustainedRate, o.Capacity = from, ramp, c
	sub := fmt.Sprintf("%s-%s-%.0fx", scOverload, name, factor)
	out := filepath.Join(s.results, sub)
	if err := writeReport(out, fmt.Sprintf("overload: %.0f × the %s broker's sustained rate, %d connections", factor, name, conns), res); err != nil {
		o.Error = err.Error()
	}
	o.ReportDir = "results/" + sub
	s.logf("overload %s %.0f×: goodput %.2f× (median of %d pairs), %d requests, %d accepted, %d × 429, %d × 503, %d other, lost %d, delivery %.0f/s (min %.0f) of %.0f, RSS %.1f MiB, probe 429 p99 %.2f ms, health max %.1f ms (%s at %.1f s; %d of %d ≥ 100 ms), alive %v",
		name, factor, o.Goodput, len(o.Pairs), o.Requests, o.Accepted, o.Rejected429, o.Rejected503, o.OtherFailures, o.Lost, o.DeliveryRate, o.MinDeliveryRate, rate,
		float64(o.PeakRSS)/mib, o.ProbeRejectP99MS, o.HealthMaxMS, o.HealthSlowestPath, o.HealthSlowestAtS, o.HealthOver100, o.HealthAnswers, o.Alive)
	return o
}

// channelFlags returns the `sluice serve` flags of sc's channel, data under dir, or why
// the channel cannot run here.
func (s *suite) channelFlags(sc scenario, dir string) ([]string, string) {
	switch sc.Channel {
	case "jetstream":
		return []string{"--channel", "jetstream", "--data-dir", filepath.Join(dir, "data")}, ""
	case "kafka":
		if s.o.kafka == "" {
			return nil, "SLUICE_KAFKA_BROKERS is not set (start Kafka with `eval \"$(scripts/kafka.sh start)\"`)"
		}
		return []string{"--channel", "kafka", "--kafka-brokers", s.o.kafka}, ""
	}
	return nil, ""
}

// ramp searches for sc's highest sustained rate against t (search) and returns its
// steps.
func (s *suite) ramp(ctx context.Context, t target, sc scenario) ([]stepResult, *bench.MaxSearch, error) {
	s.logf("%s: find-max from %.0f events/s", sc.Name, sc.StartRate)
	return s.search(ctx, t, sc.Name, searchPlan{Start: sc.StartRate, Precision: s.p.Precision, MaxSteps: s.p.MaxSteps}, nil)
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
