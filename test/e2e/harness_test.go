// Package e2e holds black-box tests that build and run the real sluice binary against
// real HTTP subscribers on 127.0.0.1.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// sluiceBin is the binary under test, built once by TestMain.
var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "../../cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// broker is a running `sluice serve`.
type broker struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	logs   *syncBuffer
	exited chan error
}

// syncBuffer is the log of a process or server that the test reads while it runs.
type syncBuffer = syncbuf.Buffer

// startBroker runs `sluice serve` on a free 127.0.0.1 port with args and waits until it
// is ready. It is stopped with SIGTERM when the test ends (if still running).
func startBroker(t *testing.T, args ...string) *broker {
	t.Helper()
	b := startServe(t, args...)
	if err := sluicetest.WaitReady(b.base, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, b.logs)
	}
	return b
}

// startServe runs `sluice serve` with args and waits only until it serves (/healthz),
// not until it is ready (some tests start brokers that are not). It is stopped with
// SIGTERM when the test ends (if still running).
func startServe(t *testing.T, args ...string) *broker {
	t.Helper()
	sv := sluicetest.Start(t, sluiceBin, 60*time.Second, args...)
	b := &broker{t: t, cmd: sv.Cmd, base: sv.Base, logs: sv.Logs, exited: sv.Exited}
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			b.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-b.exited:
			case <-time.After(30 * time.Second):
				b.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("sluice logs:\n%s", b.logs)
		}
	})
	return b
}

// stop sends SIGTERM and returns the exit error (nil for exit 0).
func (b *broker) stop(timeout time.Duration) error {
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-b.exited:
		return err
	case <-time.After(timeout):
		b.cmd.Process.Kill()
		return fmt.Errorf("sluice did not exit within %s after SIGTERM", timeout)
	}
}

// metric returns the sum of the samples of a Prometheus metric whose line starts with
// prefix (name and, optionally, labels).
func (b *broker) metric(prefix string) float64 {
	b.t.Helper()
	v, err := sluicetest.Metric(b.base, prefix)
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// rssBytes reads the broker's resident set size from /proc.
func (b *broker) rssBytes() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// received is one request a subscriber got.
type received struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// subscriber is a real HTTP server on 127.0.0.1 that records what it receives and
// answers with the status its respond function picks (202 by default).
type subscriber struct {
	*httptest.Server
	mu      sync.Mutex
	got     []received
	respond func(r *http.Request, n int) int // n counts calls from 0; called concurrently
	calls   atomic.Int64
	arrived chan struct{}
}

func newSubscriber(t *testing.T, respond func(r *http.Request, n int) int) *subscriber {
	s := &subscriber{respond: respond, arrived: make(chan struct{}, 1<<16)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		status := http.StatusAccepted
		if s.respond != nil {
			status = s.respond(r, int(s.calls.Add(1)-1))
		}
		if status >= 200 && status < 300 {
			s.mu.Lock()
			s.got = append(s.got, received{Header: r.Header.Clone(), Body: body, At: time.Now()})
			s.mu.Unlock()
		}
		w.WriteHeader(status)
		if status >= 200 && status < 300 {
			select {
			case s.arrived <- struct{}{}:
			default:
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *subscriber) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *subscriber) all() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// waitFor waits until the subscriber has n events or the timeout passes.
func (s *subscriber) waitFor(t *testing.T, n int, timeout time.Duration) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for s.count() < n {
		select {
		case <-s.arrived:
		case <-ctx.Done():
			t.Fatalf("subscriber got %d events, want %d within %s", s.count(), n, timeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return s.all()
}

// writeConfig writes a config file into a temp dir and returns its path.
func writeConfig(t *testing.T, yaml string) string { return sluicetest.WriteConfig(t, yaml) }

// replaceFile rewrites path atomically, as editors do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// postBinary sends one binary-mode event and returns the response status and body.
func postBinary(t *testing.T, url string, headers map[string]string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// discard reads a response body to its end and closes it, so the connection is reused.
func discard(resp *http.Response) {
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func ceHeaders(id, typ string) map[string]string {
	return map[string]string{
		"ce-specversion": "1.0", "ce-id": id, "ce-source": "/e2e", "ce-type": typ,
		"Content-Type": "application/json",
	}
}

// brokerYAML is a broker default/default with one trigger per {name, type filter,
// subscriber URL}; an empty type matches every event.
func brokerYAML(delivery string, triggers ...[3]string) string {
	return brokerYAMLIn("default", delivery, triggers...)
}

// brokerYAMLIn is brokerYAML for a broker named default in namespace ns.
func brokerYAMLIn(ns, delivery string, triggers ...[3]string) string {
	trs := make([]sluicetest.Trigger, len(triggers))
	for i, tr := range triggers {
		trs[i] = sluicetest.Trigger{Name: tr[0], Type: tr[1], URI: tr[2]}
	}
	return sluicetest.BrokerYAML(ns, delivery, trs...)
}
