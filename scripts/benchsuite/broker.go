package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat (100 on every
// Linux architecture Go supports).
const clockTicks = 100

// brokerProc is one `sluice serve` child process in its own process group. Its
// methods are not safe for concurrent use except CPU, HWM and Alive.
type brokerProc struct {
	cmd     *exec.Cmd
	ingest  string // the first "ingest: URL" line's URL
	logPath string
	exited  chan struct{}
	waitErr error
	proxy   bool // nginx: no /healthz of its own (it would proxy the request)
}

// startScenarioBroker writes the configuration of sc's broker, called name, with its
// triggers delivering to the receivers listening at addrs, to dir/config.yaml (creating
// dir), and starts a broker on it (startBroker).
func startScenarioBroker(ctx context.Context, sluice string, sc scenario, dir, name string, addrs []string, pinned bool, extra ...string) (*brokerProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "http://" + a + "/"
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(brokerConfig(sc, name, urls)), 0o644); err != nil {
		return nil, err
	}
	return startBroker(ctx, sluice, dir, cfg, pinned, extra...)
}

// startBroker writes nothing itself: it runs `sluice serve --config cfg --addr
// 127.0.0.1:0` plus extra flags (on CPU 1 alone when pinned), in its own process group (killed with the suite via
// Pdeathsig), and waits for the ingest URL on stdout. stderr goes to dir/serve.log.
func startBroker(ctx context.Context, sluice, dir, cfg string, pinned bool, extra ...string) (*brokerProc, error) {
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("broker log: %w", err)
	}
	args := append([]string{"serve", "--config", cfg, "--addr", "127.0.0.1:0", "--log-level", "warn"}, extra...)
	cmd := exec.Command(sluice, args...)
	if pinned { // taskset execs sluice: the PID stays the broker's
		cmd = exec.Command("taskset", append([]string{"-c", "1", sluice}, args...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("broker stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s serve: %w", sluice, err)
	}
	b := &brokerProc{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	urls := sluicetest.IngestURL(out)
	go func() {
		b.waitErr = cmd.Wait()
		logf.Close()
		close(b.exited)
	}()
	select {
	case u := <-urls:
		b.ingest = u
	case <-b.exited:
		return nil, fmt.Errorf("sluice serve exited before serving (%w): %s", b.waitErr, b.logTail())
	case <-time.After(60 * time.Second):
		b.Stop()
		return nil, fmt.Errorf("sluice serve printed no ingest URL in 60s: %s", b.logTail())
	case <-ctx.Done():
		b.Stop()
		return nil, ctx.Err()
	}
	if err := b.waitReady(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// base is the broker's http://host:port.
func (b *brokerProc) base() string {
	i := strings.Index(strings.TrimPrefix(b.ingest, "http://"), "/")
	return b.ingest[:len("http://")+i]
}

// waitReady polls /readyz for up to 30 s.
func (b *brokerProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(b.base() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.exited:
			return fmt.Errorf("sluice serve exited (%w): %s", b.waitErr, b.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("sluice serve not ready after 30s")
}

// Alive reports whether the process is still running and answers /healthz.
func (b *brokerProc) Alive() bool {
	select {
	case <-b.exited:
		return false
	default:
	}
	if b.proxy {
		return true
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(b.base() + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// CPU returns the process's user+system CPU time so far.
func (b *brokerProc) CPU() (time.Duration, error) {
	return procCPU(b.cmd.Process.Pid)
}

// HWM returns the process's peak resident set size (VmHWM) in bytes.
func (b *brokerProc) HWM() (int64, error) {
	return procStatusBytes(b.cmd.Process.Pid, "VmHWM:")
}

// Stop sends SIGTERM to the process group, waits up to 10 s, then SIGKILLs it.
func (b *brokerProc) Stop() {
	pgid := b.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-b.exited
	}
}

// logTail is the end of the broker's stderr, for error messages.
func (b *brokerProc) logTail() string {
	data, _ := os.ReadFile(b.logPath)
	if len(data) > 1500 {
		data = data[len(data)-1500:]
	}
	return strings.TrimSpace(string(data))
}

// procCPU reads utime+stime from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return parseStatCPU(string(data))
}

// parseStatCPU extracts utime+stime (fields 14 and 15) from a /proc/PID/stat line.
// The command name (field 2) may hold spaces, so fields are counted after its ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat cpu field %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procStatusBytes reads a "kB" line such as VmHWM: from /proc/PID/status.
func procStatusBytes(pid int, key string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("status of %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s %q: %w", key, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}
