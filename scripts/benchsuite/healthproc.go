package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// The health probe in a process of its own.
//
// The bench's generator and receiver run in this process, on CPU 0 when pinned, with
// thousands of goroutines at an overload's start (2,048 connections dialled and behind
// their schedule). A probe run here waits for this process's scheduler as the broker's
// goroutines wait for the broker's: its client's read of an answer is woken by the
// network poller into Go's global run queue, served once in 61 turns while the local
// queues have work, so the first probes of a 4× overload measured the bench as much as
// the broker (docs/decisions/0016-health-probe-own-process.md). A kubelet or a Prometheus server is a process of its
// own, so the probe is one too: this program runs itself with healthProbeFlag, on the
// same CPU, and the kernel, not the generator's Go scheduler, decides when it runs.

// healthProbeFlag, as the only argument besides the base URL, makes this program a
// health probe: healthProbe of that URL until its standard input closes, then the
// healthReport as JSON on standard output.
const healthProbeFlag = "--health-probe-child"

// healthReport is health in a form that crosses a pipe.
type healthReport struct {
	SlowestNS   int64  `json:"slowest_ns"`
	SlowestPath string `json:"slowest_path"`
	SlowestAtNS int64  `json:"slowest_at_ns"`
	Answers     int    `json:"answers"`
	Over100     int    `json:"over_100ms"`
	Failures    int    `json:"failures"`
}

func (h health) report() healthReport {
	return healthReport{SlowestNS: int64(h.slowest), SlowestPath: h.slowestPath, SlowestAtNS: int64(h.slowestAt),
		Answers: h.answers, Over100: h.over100, Failures: h.failures}
}

func (r healthReport) health() health {
	return health{slowest: time.Duration(r.SlowestNS), slowestPath: r.SlowestPath, slowestAt: time.Duration(r.SlowestAtNS),
		answers: r.Answers, over100: r.Over100, failures: r.Failures}
}

// asHealthProbeChild runs this process as the health probe child and exits, when its
// arguments say so; otherwise it returns. main and TestMain both start with it.
func asHealthProbeChild() {
	if len(os.Args) != 3 || os.Args[1] != healthProbeFlag {
		return
	}
	if err := runHealthProbeChild(os.Args[2], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchsuite: health probe:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runHealthProbeChild is the child's whole life: probe base until stdin ends, then
// write the report to stdout.
func runHealthProbeChild(base string, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	return json.NewEncoder(stdout).Encode(healthProbe(ctx, base).report())
}

// healthProc is a running health probe child.
type healthProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   chan []byte
}

// startHealthProbe starts this program as a health probe of base.
func startHealthProbe(base string) (*healthProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("health probe: %w", err)
	}
	cmd := exec.Command(self, healthProbeFlag, base)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the suite
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("health probe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("health probe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("health probe: starting %s: %w", self, err)
	}
	p := &healthProc{cmd: cmd, stdin: stdin, out: make(chan []byte, 1)}
	go func() {
		b, _ := io.ReadAll(stdout)
		p.out <- b
	}()
	return p, nil
}

// stop ends the probing and returns what it saw; the child is killed if it has not
// answered within 10 s.
func (p *healthProc) stop() (health, error) {
	_ = p.stdin.Close()
	var b []byte
	select {
	case b = <-p.out:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		b = <-p.out
	}
	werr := p.cmd.Wait()
	var r healthReport
	if err := json.Unmarshal(b, &r); err != nil {
		return health{}, fmt.Errorf("health probe: its report %q: %w (exit: %v)", b, err, werr)
	}
	return r.health(), nil
}
