// Package faults injects faults on purpose into a running sluice binary and checks that
// every event it accepted (202) still arrives: a real TCP proxy (Shopify's toxiproxy, run
// in this process) between Sluice and its engine or its subscribers, engine restarts,
// misbehaving subscribers. Each scenario records sent / accepted / delivered /
// duplicates / recovery time; with SLUICE_FAULTS_OUT=FILE the records are appended to
// FILE as JSON lines (make faults turns them into docs/reliability/).
//
//	go test ./test/faults/                       # the short form (make test)
//	SLUICE_FAULTS=long go test ./test/faults/    # longer faults, every toxic on every path
package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/internal/syncbuf"
	"github.com/sluice-broker/sluice/loadtest/pacer"
)

// Binaries built once by TestMain.
var sluiceBin, natsdBin string

// long is true under SLUICE_FAULTS=long: faults last longer and every toxic runs on
// every path.
var long = os.Getenv("SLUICE_FAULTS") == "long"

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxiproxy's toxics log every interruption at trace level
	dir, err := os.MkdirTemp("", "sluice-faults")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	natsdBin = filepath.Join(dir, "natsd")
	for bin, pkg := range map[string]string{sluiceBin: "../../cmd/sluice", natsdBin: "./natsd"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is the log of a process or server that the test reads while it runs.
type syncBuffer = syncbuf.Buffer

// proc is a process a test started; it is stopped (SIGTERM, then SIGKILL) when the test
// ends if still running.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
	lines  chan string // stdout lines, for the first few that tell readiness
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// Killed with this test process if it dies first, so nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{t: t, name: name, cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{}), lines: make(chan string, 16)}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(p.logs, sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(20 * time.Second)
		if t.Failed() {
			t.Logf("%s output (last 4 KiB):\n%s", name, tail(p.logs.String(), 4096))
		}
	})
	return p
}

// waitLine waits for a stdout line starting with prefix and returns the rest of it.
func (p *proc) waitLine(prefix string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-p.exited:
			p.t.Fatalf("%s exited before printing %q\n%s", p.name, prefix, tail(p.logs.String(), 4096))
		case <-deadline:
			p.t.Fatalf("%s did not print %q within %s\n%s", p.name, prefix, timeout, tail(p.logs.String(), 4096))
		}
	}
}

// stop sends SIGTERM and waits up to timeout, then kills. It is a no-op once exited.
func (p *proc) stop(timeout time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// sluice is a running `sluice serve`.
type sluice struct {
	*sluicetest.Serve
	base string // http://127.0.0.1:PORT
}

// startSluice runs `sluice serve` on a free port with args and waits until it is ready;
// it is stopped (SIGTERM, then SIGKILL) when the test ends if still running.
func startSluice(t *testing.T, args ...string) *sluice {
	t.Helper()
	sv := sluicetest.Start(t, sluiceBin, 30*time.Second, args...)
	s := &sluice{Serve: sv, base: sv.Base}
	t.Cleanup(func() {
		s.stop(20 * time.Second)
		if t.Failed() {
			t.Logf("sluice output (last 4 KiB):\n%s", tail(sv.Logs.String(), 4096))
		}
	})
	if err := sluicetest.WaitReady(s.base, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, tail(sv.Logs.String(), 4096))
	}
	return s
}

// stop sends SIGTERM and waits up to timeout, then kills. It is a no-op once exited.
func (s *sluice) stop(timeout time.Duration) {
	select {
	case <-s.Done:
		return
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Done:
	case <-time.After(timeout):
		_ = s.Cmd.Process.Kill()
		<-s.Done
	}
}

// metric sums the samples of the Prometheus metric lines starting with prefix; -1 if
// /metrics cannot be read.
func (s *sluice) metric(prefix string) float64 {
	v, err := sluicetest.Metric(s.base, prefix)
	if err != nil {
		return -1
	}
	return v
}

// usage is the process's resident memory, goroutines and open file descriptors.
type usage struct {
	RSS        int64
	Goroutines int
	FDs        int
}

func (s *sluice) usage() usage {
	var u usage
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Cmd.Process.Pid)); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				u.RSS = kb << 10
			}
		}
	}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.Cmd.Process.Pid)); err == nil {
		u.FDs = len(fds)
	}
	u.Goroutines = int(s.metric("go_goroutines "))
	return u
}

// sink is a subscriber that counts deliveries per ce-id. While down is set it answers
// 503, counting nothing.
type sink struct {
	*httptest.Server
	mu   sync.Mutex
	got  map[string]int
	down atomic.Bool
}

func newSink(t *testing.T) *sink {
	s := &sink{got: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if s.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		s.got[r.Header.Get("ce-id")]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(s.Close)
	return s
}

// count reports how many of ids were delivered at least once, and the deliveries of
// those ids beyond the first.
func (s *sink) count(ids []string) (delivered, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if n := s.got[id]; n > 0 {
			delivered++
			dups += n - 1
		}
	}
	return delivered, dups
}

// waitAll waits until every id was delivered or timeout passes, and returns how long it
// took (or the timeout).
func (s *sink) waitAll(ids []string, timeout time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		if d, _ := s.count(ids); d == len(ids) {
			return time.Since(start), true
		}
		if time.Since(start) > timeout {
			return timeout, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// payload is the body of every event the fault tests send.
var payload = bytes.Repeat([]byte("x"), 1024)

// loader is a running load (sluicetest.Load) of 1 KiB events with ce-id PREFIX-N.
type loader struct {
	*sluicetest.LoadRun
	prefix string
}

// startLoader sends rate events/s of type typ to url from workers workers until Stop.
func startLoader(url, prefix, typ string, rate, workers int) loader {
	p := sluicetest.Poster{Client: sluicetest.NewClient(2*workers, 15*time.Second), URL: url,
		Type: typ, Source: "/faults", Data: payload,
		ID: func(n uint64) string { return prefix + "-" + strconv.FormatUint(n, 10) }}
	ld := sluicetest.Load{Pacer: pacer.Constant{Rate: float64(rate)}, Workers: workers, Send: p.Send}
	return loader{LoadRun: ld.Start(context.Background()), prefix: prefix}
}

// startFaultLoad is the fault scenarios' load: rate events/s of type io.sluice.faults.
func startFaultLoad(url, prefix string, rate int) loader {
	return startLoader(url, prefix, "io.sluice.faults", rate, 64)
}

// id is the ce-id of event n.
func (l loader) id(n uint64) string { return l.prefix + "-" + strconv.FormatUint(n, 10) }

// acceptedIDs returns the ce-ids of the events accepted before t (all of them for the
// zero time).
func (l loader) acceptedIDs(before time.Time) []string {
	var ids []string
	for _, n := range l.AcceptedBefore(before) {
		ids = append(ids, l.id(n))
	}
	return ids
}

// result is one scenario's outcome, as the report shows it.
type result struct {
	Fault      string  `json:"fault"`
	Path       string  `json:"path"`
	Sent       int     `json:"sent"`
	Accepted   int     `json:"accepted"`
	Refused    string  `json:"refused,omitempty"`
	Delivered  int     `json:"delivered"`
	Duplicates int     `json:"duplicates"`
	Lost       int     `json:"lost"`
	RecoveryS  float64 `json:"recovery_s"` // fault removed → every event accepted before delivered
	// IngressRecoveryS is fault removed (or engine back) → first 202; 0 when ingress never
	// refused.
	IngressRecoveryS float64 `json:"ingress_recovery_s"`
	Note             string  `json:"note,omitempty"`
}

// record logs r and appends it to $SLUICE_FAULTS_OUT when set.
func record(t *testing.T, r result) {
	t.Helper()
	t.Logf("%s / %s: sent %d, accepted %d (refused: %s), delivered %d, duplicates %d, lost %d, backlog delivered %.2fs and ingress accepting %.2fs after recovery %s",
		r.Path, r.Fault, r.Sent, r.Accepted, r.Refused, r.Delivered, r.Duplicates, r.Lost, r.RecoveryS, r.IngressRecoveryS, r.Note)
	out := os.Getenv("SLUICE_FAULTS_OUT")
	if out == "" {
		return
	}
	b, _ := json.Marshal(r)
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("SLUICE_FAULTS_OUT: %v", err)
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// brokerYAML is broker default in namespace ns with one trigger per name → URL, each
// retrying with delivery.
func brokerYAML(ns, delivery string, triggers ...[2]string) string {
	trs := make([]sluicetest.Trigger, len(triggers))
	for i, tr := range triggers {
		trs[i] = sluicetest.Trigger{Name: tr[0], URI: tr[1]}
	}
	return sluicetest.BrokerYAML(ns, delivery, trs...)
}

func writeConfig(t *testing.T, yaml string) string { return sluicetest.WriteConfig(t, yaml) }

// retrying is a delivery policy that keeps retrying through any fault these tests make.
const retrying = "{retry: 10000, backoffPolicy: linear, backoffDelay: PT0.1S, timeout: PT2S}"
