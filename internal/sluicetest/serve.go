// Package sluicetest holds what the repo's tests need alike. It starts `sluice serve`
// processes for the end-to-end, cluster, fault and deploy tests (and reads the ingest
// URL for the bench suite's own start): the start, the wait for the ingest URL and for
// /readyz, and the reading of /metrics that each of those suites needs alike. How a
// process is stopped stays with each suite (their tests kill, restart and time
// processes differently). It drives their load (Load: events paced by loadtest/pacer,
// each one's answer recorded, so a test can check that nothing accepted was lost) and
// writes their broker manifests (BrokerYAML, WriteConfig). For every package's tests it
// also waits for a condition (Eventually) and reads a metric's series from a registry
// (Gather).
package sluicetest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// Serve is one `sluice serve` process.
type Serve struct {
	Cmd  *exec.Cmd
	Base string          // http://127.0.0.1:PORT, from the ingest URL it printed
	Logs *syncbuf.Buffer // its standard error
	// Exited receives the result of Cmd.Wait once, when the process ends.
	Exited chan error
	// Done is closed when the process has ended, after Exited got its result.
	Done <-chan struct{}
}

// Start runs `bin serve --addr 127.0.0.1:0 args...` and returns once the process has
// printed its ingest URL. It fails t, with the process's log, if the process exits first
// or prints none within timeout (then it is killed). The caller stops the process.
func Start(t testing.TB, bin string, timeout time.Duration, args ...string) *Serve {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	// Killed with this test process if it dies first, so nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	s := &Serve{Cmd: cmd, Logs: &syncbuf.Buffer{}, Exited: make(chan error, 1), Done: done}
	cmd.Stderr = s.Logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := IngestURL(stdout)
	go func() {
		s.Exited <- cmd.Wait()
		close(done)
	}()
	select {
	case u := <-urls:
		base, err := BaseOf(u)
		if err != nil {
			_ = cmd.Process.Kill()
			t.Fatalf("sluice serve: %v\n%s", err, s.Logs)
		}
		s.Base = base
	case err := <-s.Exited:
		t.Fatalf("sluice serve exited before serving: %v\n%s", err, s.Logs)
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		t.Fatalf("sluice serve did not print its ingest URL in %s\n%s", timeout, s.Logs)
	}
	return s
}

// IngestURL reads the standard output of `sluice serve` and sends on the channel it
// returns the first ingest URL the process prints ("ingest: URL"). It reads r to its
// end (past a line too long to scan, too), so that the process never blocks on a full
// pipe.
func IngestURL(r io.Reader) <-chan string {
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sent := false
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "ingest: "); ok && !sent {
				urls <- strings.TrimSpace(u)
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	return urls
}

// BaseOf returns the scheme and host of an ingest URL such as
// http://127.0.0.1:8080/default/default.
func BaseOf(u string) (string, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return "", fmt.Errorf("ingest URL %q has no scheme", u)
	}
	host, _, _ := strings.Cut(rest, "/")
	return scheme + "://" + host, nil
}

// WaitReady polls base's GET /readyz until it answers 200; an error if it does not
// within timeout.
func WaitReady(base string, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice serve at %s not ready in %s", base, timeout)
		}
	}
}

// Metric returns the sum of the samples of the Prometheus metric lines at base's /metrics
// that start with prefix (a name and, optionally, labels).
func Metric(base, prefix string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return 0, fmt.Errorf("metric line %q: %w", line, err)
			}
			sum += v
		}
	}
	return sum, sc.Err()
}
