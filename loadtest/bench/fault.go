package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Bounds of --fault.
const (
	// MaxFaults bounds the --fault flags of one run.
	MaxFaults = 32
	// FaultOutputTail is how many bytes of a fault command's output (stdout and stderr
	// together) the report keeps: the last ones.
	FaultOutputTail = 2048
	// faultWaitDelay bounds the wait for a fault command's exit after it was killed at
	// the end of the run.
	faultWaitDelay = 5 * time.Second
)

// Fault is a shell command (bash -c) run at a time in a bench run.
type Fault struct {
	At      time.Duration `json:"at_ns"`   // from the load's start (warm-up included)
	Command string        `json:"command"` // run with bash -c
}

// ParseFault parses a --fault value: at=DURATION,run=COMMAND. run= comes last and
// takes the rest of the value, commas included.
func ParseFault(s string) (Fault, error) {
	var f Fault
	head, cmd, ok := strings.Cut(s, "run=")
	head = strings.TrimSpace(head)
	if !ok {
		return f, fmt.Errorf("--fault %q: missing run=COMMAND (the shell command to run, last)", s)
	}
	if head != "" && !strings.HasSuffix(head, ",") {
		return f, fmt.Errorf("--fault %q: run= must start a field: write at=DURATION,run=COMMAND", s)
	}
	f.Command = strings.TrimSpace(cmd)
	if f.Command == "" {
		return f, fmt.Errorf("--fault %q: run= is empty: give the shell command to run", s)
	}
	seenAt := false
	for _, kv := range strings.Split(strings.TrimSuffix(head, ","), ",") {
		if kv == "" && head == "" {
			break
		}
		k, v, _ := strings.Cut(kv, "=")
		switch strings.TrimSpace(k) {
		case "at":
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return f, fmt.Errorf("--fault %q: at=%q is not a duration such as 20s: %w", s, v, err)
			}
			if d < 0 {
				return f, fmt.Errorf("--fault %q: at=%s is negative: give the time from the load's start", s, v)
			}
			f.At, seenAt = d, true
		default:
			return f, fmt.Errorf("--fault %q: unknown field %q (want at=DURATION,run=COMMAND)", s, kv)
		}
	}
	if !seenAt {
		return f, fmt.Errorf("--fault %q: missing at=DURATION (when to run it, from the load's start)", s)
	}
	return f, nil
}

// FaultRecord is what a fault's command did, and what the fault cost the run.
type FaultRecord struct {
	Fault
	Ran        bool          `json:"ran"`       // the run reached At
	ExitCode   int           `json:"exit_code"` // -1 when not run or killed
	Error      string        `json:"error,omitempty"`
	OutputTail string        `json:"output_tail"` // the last FaultOutputTail bytes of stdout and stderr
	Took       time.Duration `json:"took_ns"`
	// IngressRecovery is the time from the fault until the target answered a whole
	// second of requests with 2xx only, after its first failing second (0 when no
	// request failed); nil when it never did. Resolution: one second.
	IngressRecovery *time.Duration `json:"ingress_recovery_ns,omitempty"`
	// BacklogDrain is the time from the fault until the events accepted but not yet
	// delivered were back to their level before the fault (0 when they never rose
	// above it); nil when they never were. Resolution: one second.
	BacklogDrain *time.Duration `json:"backlog_drain_ns,omitempty"`
	// Lost counts the events, due from the fault until the next fault (or the end),
	// that the target accepted and never delivered.
	Lost uint64 `json:"lost"`
}

// runFaults runs each fault at start+At, or not at all once ctx is done; a command
// still running when ctx is done is killed. It returns when every fault finished.
func runFaults(ctx context.Context, start time.Time, faults []Fault) []FaultRecord {
	recs := make([]FaultRecord, len(faults))
	var wg sync.WaitGroup
	for i, f := range faults {
		recs[i] = FaultRecord{Fault: f, ExitCode: -1}
		wg.Add(1)
		go func(r *FaultRecord) {
			defer wg.Done()
			t := time.NewTimer(time.Until(start.Add(r.At)))
			defer t.Stop()
			select {
			case <-ctx.Done():
				r.Error = "not run: the run ended first"
				return
			case <-t.C:
			}
			r.Ran = true
			runFault(ctx, r)
		}(&recs[i])
	}
	wg.Wait()
	return recs
}

// runFault runs r's command with bash -c, its output in a temporary file (so that a
// process it leaves in the background, such as a restarted broker, holds no pipe).
func runFault(ctx context.Context, r *FaultRecord) {
	out, err := os.CreateTemp("", "sluice-fault-*.log")
	if err != nil {
		r.Error = fmt.Sprintf("output file: %v", err)
		return
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.CommandContext(ctx, "bash", "-c", r.Command)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = faultWaitDelay
	began := time.Now()
	err = cmd.Run()
	r.Took = time.Since(began)
	r.OutputTail = fileTail(out, FaultOutputTail)
	var exit *exec.ExitError
	switch {
	case err == nil:
		r.ExitCode = 0
	case ctx.Err() != nil:
		r.Error = "killed: still running at the end of the run"
	case errors.As(err, &exit):
		r.ExitCode = exit.ExitCode()
	default:
		r.Error = err.Error()
	}
}

// fileTail returns the last n bytes of f.
func fileTail(f *os.File, n int64) string {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return ""
	}
	off := max(size-n, 0)
	b := make([]byte, size-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}

// recoveryWindow is how many seconds before a fault set the backlog's normal level.
const recoveryWindow = 3

// faultRecovery computes a fault's recovery from the per-second series (second i of
// both counts from the load's start): ingress and backlog recovery as FaultRecord
// describes them. next is the second of the next fault (or past the end): a failure
// from then on belongs to it. epr is the events per request.
func faultRecovery(ls []stats.LoadSecond, rs []stats.RecvSecond, epr uint64, at time.Duration, next int) (ingress, drain *time.Duration) {
	f := int(at / time.Second)
	since := func(s int) *time.Duration { d := max(time.Duration(s)*time.Second-at, 0); return &d }
	// Ingress: the first second after the first failing one with 2xx answers only.
	firstFail := -1
	for s := f; s < len(ls) && s < next; s++ {
		if ls[s].Failed > 0 {
			firstFail = s
			break
		}
	}
	if firstFail < 0 {
		d := time.Duration(0)
		ingress = &d
	} else {
		for s := firstFail + 1; s < len(ls); s++ {
			if ls[s].Failed == 0 && ls[s].OK > 0 {
				ingress = since(s)
				break
			}
		}
	}
	// Backlog: accepted minus delivered at the end of each second.
	n := max(len(ls), len(rs))
	backlog := make([]int64, n)
	var acc, del int64
	for i := range n {
		if i < len(ls) {
			acc += int64(ls[i].OK * epr)
		}
		if i < len(rs) {
			del += int64(rs[i].Events)
		}
		backlog[i] = acc - del
	}
	var level int64
	for s := max(f-recoveryWindow, 0); s < f && s < n; s++ {
		level = max(level, backlog[s])
	}
	rose := false
	for s := f; s < n; s++ {
		if backlog[s] > level {
			rose = true
			continue
		}
		if rose {
			return ingress, since(s + 1)
		}
	}
	if !rose {
		d := time.Duration(0)
		return ingress, &d
	}
	return ingress, nil
}
