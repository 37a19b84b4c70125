package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// triggerState is GET /triggers/<ns>/t on b, read with the operator token.
func triggerState(t *testing.T, b *broker, ns, token string) (paused bool, by string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+"/triggers/"+ns+"/t", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Paused   bool
		PausedBy []string
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /triggers/%s/t: %s", ns, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Paused, strings.Join(st.PausedBy, ",")
}

// TestPauseJetStreamReplicasShare: two replicas on one NATS server share a pause sent
// through the operator API (runPauseReplicas).
func TestPauseJetStreamReplicasShare(t *testing.T) {
	ns := natsAt(t, server.RANDOM_PORT, t.TempDir())
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	runPauseReplicas(t, "default", sharedLag, "--channel", "jetstream", "--nats-url", url, "--jetstream-replicas", "1")
}

// TestPauseKafkaReplicasShare is TestPauseJetStreamReplicasShare on Kafka (the cluster
// of scripts/kafka.sh), in a namespace of its own, so its topics are new.
func TestPauseKafkaReplicasShare(t *testing.T) {
	runPauseReplicas(t, fmt.Sprintf("pause%d", time.Now().UnixNano()), sharedLag, kafkaArgs(t)...)
}

// TestPauseKinesisReplicasShare is TestPauseJetStreamReplicasShare on Kinesis with a
// lease table (the servers of scripts/kinesis.sh and scripts/dynalite.sh): the pause is
// an item of the lease table.
func TestPauseKinesisReplicasShare(t *testing.T) {
	args := kinesisArgs(t)
	args = args[:len(args)-2] // its --kinesis-checkpoint-dir: the lease table holds the checkpoints
	args = append(args, "--kinesis-lease-table", fmt.Sprintf("sluice-e2e-%d", time.Now().UnixNano()),
		"--dynamodb-endpoint", kinesistest.DynamoDBEndpoint(t))
	// Each replica's depth is what it read of the shards it leases and has not settled:
	// a shard read by one, then leased to the other, counts on both.
	runPauseReplicas(t, fmt.Sprintf("pause%d", time.Now().UnixNano()), func(a, b float64) bool { return a+b >= 20 }, args...)
}

// sharedLag: each replica's sluice_queue_depth is the whole subscription's lag.
func sharedLag(a, b float64) bool { return a == 20 && b == 20 }

// runPauseReplicas runs two replicas with args. Paused on a, the events sent to b are
// stored and not delivered; a restarted a starts the trigger paused; resumed on b,
// every event is delivered.
// queued tells, from the two replicas' sluice_queue_depth, that all 20 events wait.
func runPauseReplicas(t *testing.T, ns string, queued func(a, b float64) bool, args ...string) {
	const n = 20
	const tok = "0123456789abcdef0123456789abcdef"
	sub := newSubscriber(t, nil)
	token := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}))
	args = append([]string{"--config", cfg, "--ops-token-file", token}, args...)
	a, b := startBroker(t, args...), startBroker(t, args...)
	trigger := ns + "/t"
	depth := `sluice_queue_depth{broker="` + ns + `/default",trigger="` + trigger + `"}`

	if out, err := sluiceCLI("trigger", "pause", "--addr", a.base, "--ops-token-file", token, trigger); err != nil || strings.TrimSpace(out) != "trigger "+trigger+": paused" {
		t.Fatalf("pause on a: %v, %q", err, out)
	}
	sluicetest.Eventually(t, 30*time.Second, "b sees the pause", func() bool {
		paused, by := triggerState(t, b, ns, tok)
		return paused && by == "api"
	})
	for i := range n {
		if code, body := postBinary(t, b.base+"/"+ns+"/default", ceHeaders(fmt.Sprintf("p%d", i), "e2e.pause"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, body)
		}
	}
	// Every event is stored and waits: the backend's lag holds them all.
	sluicetest.Eventually(t, 60*time.Second, "all queued", func() bool {
		da, db := opsMetric(t, a.base, tok, depth), opsMetric(t, b.base, tok, depth)
		return queued(da, db)
	})
	if got := sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events while a replica of the trigger was paused", got)
	}

	// A restarted replica starts the trigger paused: the pause is in the channel.
	if err := a.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	a = startBroker(t, args...)
	if paused, by := triggerState(t, a, ns, tok); !paused || by != "api" {
		t.Fatalf("restarted a: paused %v by %q; want paused by api", paused, by)
	}
	if got := sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events after a restarted", got)
	}

	if out, err := sluiceCLI("trigger", "resume", "--addr", b.base, "--ops-token-file", token, trigger); err != nil || strings.TrimSpace(out) != "trigger "+trigger+": delivering" {
		t.Fatalf("resume on b: %v, %q", err, out)
	}
	sub.waitFor(t, n, 60*time.Second)
	sluicetest.Eventually(t, 30*time.Second, "a sees the resume", func() bool {
		paused, _ := triggerState(t, a, ns, tok)
		return !paused
	})
	seen := map[string]bool{}
	for _, r := range sub.all() {
		seen[r.Header.Get("Ce-Id")] = true
	}
	if len(seen) != n {
		t.Errorf("subscriber got %d distinct events, want %d", len(seen), n)
	}
}

// TestPauseStoreDownRefused: while the channel's store cannot take a pause (the NATS
// server is down), `sluice trigger pause` is answered 503 and the trigger keeps
// delivering state: nothing changed.
func TestPauseStoreDownRefused(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	ns := natsAt(t, server.RANDOM_PORT, t.TempDir())
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	sub := newSubscriber(t, nil)
	token := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, brokerYAML("", [3]string{"t", "", sub.URL}))
	a := startBroker(t, "--config", cfg, "--ops-token-file", token, "--channel", "jetstream", "--nats-url", url, "--jetstream-replicas", "1")
	ns.Shutdown()
	ns.WaitForShutdown()
	out, err := sluiceCLI("trigger", "pause", "--addr", a.base, "--ops-token-file", token, "default/t")
	if err == nil || !strings.Contains(out, "503") || !strings.Contains(out, "pause not done") {
		t.Fatalf("pause with the store down: %v, %q; want a 503 saying the pause was not done", err, out)
	}
	if paused, by := triggerState(t, a, "default", tok); paused || by != "" {
		t.Fatalf("after a refused pause: paused %v by %q; want delivering", paused, by)
	}
}

// TestPauseKinesisWithoutLeaseTable: a kinesis channel without a lease table keeps no
// flags (each replica reads its own checkpoints): the pause is held by the process, as on
// memory, and is not refused.
func TestPauseKinesisWithoutLeaseTable(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	ns := fmt.Sprintf("pause%d", time.Now().UnixNano())
	sub := newSubscriber(t, nil)
	token := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}))
	a := startBroker(t, append([]string{"--config", cfg, "--ops-token-file", token}, kinesisArgs(t)...)...)
	if out, err := sluiceCLI("trigger", "pause", "--addr", a.base, "--ops-token-file", token, ns+"/t"); err != nil || strings.TrimSpace(out) != "trigger "+ns+"/t: paused" {
		t.Fatalf("pause: %v, %q", err, out)
	}
	if paused, by := triggerState(t, a, ns, tok); !paused || by != "api" {
		t.Fatalf("paused %v by %q; want paused by api", paused, by)
	}
}
