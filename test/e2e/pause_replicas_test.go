package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// triggerState is GET /triggers/default/t on b, read with the operator token.
func triggerState(t *testing.T, b *broker, token string) (paused bool, by string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+"/triggers/default/t", nil)
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
		t.Fatalf("GET /triggers/default/t: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Paused, strings.Join(st.PausedBy, ",")
}

// TestPauseJetStreamReplicasShare: two replicas on one NATS server share a pause sent
// through the operator API. Paused on a, the events sent to b are stored and not
// delivered; a restarted a starts the trigger paused; resumed on b, every event is
// delivered once.
func TestPauseJetStreamReplicasShare(t *testing.T) {
	const n = 20
	const tok = "0123456789abcdef0123456789abcdef"
	ns := natsAt(t, server.RANDOM_PORT, t.TempDir())
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	s := newDLQSetup(t, nil) // its token file holds tok
	s.up.Store(true)
	args := []string{"--config", s.cfg, "--ops-token-file", s.token, "--channel", "jetstream", "--nats-url", url, "--jetstream-replicas", "1"}
	a, b := startBroker(t, args...), startBroker(t, args...)
	depth := `sluice_queue_depth{broker="default/default",trigger="default/t"}`

	if out, err := sluiceCLI("trigger", "pause", "--addr", a.base, "--ops-token-file", s.token, "default/t"); err != nil || strings.TrimSpace(out) != "trigger default/t: paused" {
		t.Fatalf("pause on a: %v, %q", err, out)
	}
	sluicetest.Eventually(t, 30*time.Second, "b sees the pause", func() bool {
		paused, by := triggerState(t, b, tok)
		return paused && by == "api"
	})
	for i := range n {
		if code, body := postBinary(t, b.base+"/default/default", ceHeaders(fmt.Sprintf("p%d", i), "e2e.pause"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, body)
		}
	}
	// Every event is stored and waits on both: the shared consumer's lag holds them all.
	sluicetest.Eventually(t, 30*time.Second, "all queued", func() bool {
		return opsMetric(t, a.base, tok, depth) == n && opsMetric(t, b.base, tok, depth) == n
	})
	if got := s.sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events while a replica of the trigger was paused", got)
	}

	// A restarted replica starts the trigger paused: the pause is in the channel.
	if err := a.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	a = startBroker(t, args...)
	if paused, by := triggerState(t, a, tok); !paused || by != "api" {
		t.Fatalf("restarted a: paused %v by %q; want paused by api", paused, by)
	}
	if got := s.sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events after a restarted", got)
	}

	if out, err := sluiceCLI("trigger", "resume", "--addr", b.base, "--ops-token-file", s.token, "default/t"); err != nil || strings.TrimSpace(out) != "trigger default/t: delivering" {
		t.Fatalf("resume on b: %v, %q", err, out)
	}
	s.sub.waitFor(t, n, 60*time.Second)
	sluicetest.Eventually(t, 30*time.Second, "a sees the resume", func() bool {
		paused, _ := triggerState(t, a, tok)
		return !paused
	})
	seen := map[string]bool{}
	for _, r := range s.sub.all() {
		seen[r.Header.Get("Ce-Id")] = true
	}
	if len(seen) != n {
		t.Errorf("subscriber got %d distinct events, want %d", len(seen), n)
	}
}
