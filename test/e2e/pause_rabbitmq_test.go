package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPauseRabbitMQReplicasShare is TestPauseJetStreamReplicasShare on RabbitMQ (the
// private node of scripts/rabbitmq.sh), in a namespace of its own, so its exchange,
// queues and state stream are new: a pause made through one replica is seen by the
// other, and by the first after its restart, from the broker's state stream.
func TestPauseRabbitMQReplicasShare(t *testing.T) {
	// Each replica's depth is the queue's ready messages plus those it holds unsettled:
	// together they hold all of them.
	runPauseReplicas(t, fmt.Sprintf("pause%d", time.Now().UnixNano()), func(a, b float64) bool { return a+b >= 20 }, rabbitmqArgs(t)...)
}

// TestPauseRabbitMQSurvivesKill: a trigger paused through the API on RabbitMQ stays
// paused across kill -9 of its only replica: the restarted process starts it paused and
// delivers nothing of what was accepted meanwhile; resumed, it delivers every event.
func TestPauseRabbitMQSurvivesKill(t *testing.T) {
	const n = 10
	const tok = "0123456789abcdef0123456789abcdef"
	ns := fmt.Sprintf("pausekill%d", time.Now().UnixNano())
	sub := newSubscriber(t, nil)
	token := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}))
	args := append([]string{"--config", cfg, "--ops-token-file", token}, rabbitmqArgs(t)...)
	a := startBroker(t, args...)
	trigger := ns + "/t"
	if out, err := sluiceCLI("trigger", "pause", "--addr", a.base, "--ops-token-file", token, trigger); err != nil || strings.TrimSpace(out) != "trigger "+trigger+": paused" {
		t.Fatalf("pause: %v, %q", err, out)
	}
	for i := range n {
		if code, body := postBinary(t, a.base+"/"+ns+"/default", ceHeaders(fmt.Sprintf("k%d", i), "e2e.pause"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, body)
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	a = startBroker(t, args...)
	if paused, by := triggerState(t, a, ns, tok); !paused || by != "api" {
		t.Fatalf("after kill -9: paused %v by %q; want paused by api", paused, by)
	}
	if got := sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events while the trigger was paused", got)
	}
	if out, err := sluiceCLI("trigger", "resume", "--addr", a.base, "--ops-token-file", token, trigger); err != nil || strings.TrimSpace(out) != "trigger "+trigger+": delivering" {
		t.Fatalf("resume: %v, %q", err, out)
	}
	sub.waitFor(t, n, 60*time.Second)
	seen := map[string]bool{}
	for _, r := range sub.all() {
		seen[r.Header.Get("Ce-Id")] = true
	}
	if len(seen) != n {
		t.Errorf("subscriber got %d distinct events, want %d", len(seen), n)
	}
}
