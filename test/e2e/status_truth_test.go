package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// closedPort returns a port on 127.0.0.1 that nobody listens on: one the kernel just
// gave out and took back.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// readiness is what each of the four views says of a running sluice: /readyz,
// /status, `sluice status` and the dashboard's snapshot.
type readiness struct {
	readyz       int    // status code
	readyzBody   string // its text
	status       bool   // GET /status's "ready"
	statusReason string // the default/default Broker's reason
	cli          int    // `sluice status` exit code
	cliOut       string
	uiListed     bool // /ui/snapshot.json lists the default/default broker
	ui           bool // and says it is "ready"
	uiReason     string
}

func (r readiness) allReady() bool {
	return r.readyz == http.StatusOK && r.status && r.cli == 0 && r.uiListed && r.ui
}

func (r readiness) noneReady() bool {
	return r.readyz == http.StatusServiceUnavailable && !r.status && r.cli == 1 && r.uiListed && !r.ui
}

// notReadyFor is the state of a sluice whose default/default broker every view says
// is not ready, each naming why.
func notReadyFor(why string) func(readiness) bool {
	return func(r readiness) bool {
		if !r.noneReady() {
			return false
		}
		for _, text := range []string{r.readyzBody, r.statusReason, r.cliOut, r.uiReason} {
			if !strings.Contains(text, why) {
				return false
			}
		}
		return true
	}
}

func (r readiness) String() string {
	return fmt.Sprintf("/readyz %d %q; /status ready=%v reason %q; sluice status exit %d %q; /ui listed=%v ready=%v reason %q",
		r.readyz, r.readyzBody, r.status, r.statusReason, r.cli, r.cliOut, r.uiListed, r.ui, r.uiReason)
}

// readinessOf asks b's four views.
func readinessOf(t *testing.T, b *broker) readiness {
	t.Helper()
	var r readiness
	c := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, []byte) {
		resp, err := c.Get(b.base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	code, body := get("/readyz")
	r.readyz, r.readyzBody = code, strings.TrimSpace(string(body))

	_, body = get("/status")
	var st struct {
		Ready   bool `json:"ready"`
		Objects []struct {
			Kind, Namespace, Name, Reason string
			Ready                         bool
		} `json:"objects"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("/status: %v: %s", err, body)
	}
	r.status = st.Ready
	for _, o := range st.Objects {
		if o.Namespace == "default" && o.Name == "default" {
			r.statusReason = o.Reason
		}
	}

	cmd := exec.Command(sluiceBin, "status", "--addr", strings.TrimPrefix(b.base, "http://"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r.cliOut = out.String()
	if ee, ok := err.(*exec.ExitError); ok {
		r.cli = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("sluice status: %v", err)
	}

	_, body = get("/ui/snapshot.json")
	var snap struct {
		Brokers []struct {
			Name           string `json:"name"`
			Ready          bool   `json:"ready"`
			NotReadyReason string `json:"not_ready_reason"`
		} `json:"brokers"`
	}
	if err := json.Unmarshal(body, &snap); err != nil {
		t.Fatalf("/ui/snapshot.json: %v: %s", err, body)
	}
	for _, br := range snap.Brokers {
		if br.Name == "default/default" {
			r.uiListed, r.ui, r.uiReason = true, br.Ready, br.NotReadyReason
		}
	}
	return r
}

// waitReadiness polls b's views until want holds, and returns what they said; the wait
// only bounds a hang.
func waitReadiness(t *testing.T, b *broker, what string, want func(readiness) bool) readiness {
	t.Helper()
	var last readiness
	deadline := time.Now().Add(60 * time.Second)
	for {
		last = readinessOf(t, b)
		if want(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 60s: %v", what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestStatusKafkaUnreachable: a broker on the kafka channel whose cluster cannot be
// reached refuses events with 503, and every view of its state says not ready and
// names why.
func TestStatusKafkaUnreachable(t *testing.T) {
	port := closedPort(t)
	sub := newSubscriber(t, nil)
	cfg := writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL}))
	b := startServe(t, "--config", cfg, "--channel", "kafka", "--kafka-brokers", fmt.Sprintf("127.0.0.1:%d", port),
		"--publish-timeout", "2s")

	code, body := postBinary(t, b.base+"/default/default", ceHeaders("k1", "e2e.status"), []byte(`{}`))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("POST with Kafka unreachable: %d %q, want 503", code, body)
	}
	waitReadiness(t, b, "not ready, naming the unreachable Kafka cluster", notReadyFor("Kafka cluster is unreachable"))
	// The ingress refuses still, for the same reason.
	code, body = postBinary(t, b.base+"/default/default", ceHeaders("k2", "e2e.status"), []byte(`{}`))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("second POST: %d %q, want 503", code, body)
	}
}

// natsAt runs a NATS server with JetStream on 127.0.0.1:port (a port of its choosing if
// port is -1) storing under dir, until the test ends or it is shut down.
func natsAt(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		ServerName: "e2e", Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server not ready in 30s")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// TestStatusJetStreamServerDown: a broker on an external NATS server is not ready in
// every view while the server is down, and ready again once it is back.
func TestStatusJetStreamServerDown(t *testing.T) {
	// NATS picks its port, and comes back on the same one: no port is probed and released.
	dir := t.TempDir()
	ns := natsAt(t, server.RANDOM_PORT, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	sub := newSubscriber(t, nil)
	cfg := writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL}))
	b := startServe(t, "--config", cfg, "--channel", "jetstream", "--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", port),
		"--jetstream-replicas", "1", "--publish-timeout", "2s")
	waitReadiness(t, b, "ready", readiness.allReady)
	if code, body := postBinary(t, b.base+"/default/default", ceHeaders("j1", "e2e.status"), []byte(`{}`)); code != http.StatusAccepted {
		t.Fatalf("POST with NATS up: %d %q, want 202", code, body)
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	waitReadiness(t, b, "not ready, naming the unreachable JetStream server", notReadyFor("JetStream server is unreachable"))
	if code, body := postBinary(t, b.base+"/default/default", ceHeaders("j2", "e2e.status"), []byte(`{}`)); code != http.StatusServiceUnavailable {
		t.Fatalf("POST with NATS down: %d %q, want 503", code, body)
	}

	natsAt(t, port, dir)
	waitReadiness(t, b, "ready again", readiness.allReady)
	if code, body := postBinary(t, b.base+"/default/default", ceHeaders("j3", "e2e.status"), []byte(`{}`)); code != http.StatusAccepted {
		t.Fatalf("POST with NATS back: %d %q, want 202", code, body)
	}
	sub.waitFor(t, 2, 60*time.Second) // j1 and j3; j2 was refused
}
