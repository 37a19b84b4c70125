package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// opsMetric is broker.metric for a server with --ops-token-file: the sum of the samples
// of the metric lines starting with prefix, read with the token.
func opsMetric(t *testing.T, base, token, prefix string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// sluiceCLI runs the sluice binary with args and returns its exit error and output.
func sluiceCLI(args ...string) (string, error) {
	out, err := exec.Command(sluiceBin, args...).CombinedOutput()
	return string(out), err
}

// TestPauseResumeCLI: `sluice trigger pause` on a server with --ops-token-file (refused
// without the token) stops a trigger's deliveries while its events keep being accepted
// and stored on the memory channel; `sluice trigger resume` delivers every one of them,
// exactly once.
func TestPauseResumeCLI(t *testing.T) {
	const n = 25
	sub := newSubscriber(t, nil)
	token := filepath.Join(t.TempDir(), "ops-token")
	const tok = "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(token, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, brokerYAML("", [3]string{"t", "", sub.URL}))
	b := startBroker(t, "--config", cfg, "--ops-token-file", token)
	depth := `sluice_queue_depth{broker="default/default",trigger="default/t"}`

	out, err := sluiceCLI("trigger", "pause", "--addr", b.base, "default/t")
	if err == nil || !strings.Contains(out, "401") {
		t.Fatalf("pause without the token: %v, %q; want a 401", err, out)
	}
	out, err = sluiceCLI("trigger", "pause", "--addr", b.base, "--ops-token-file", token, "default/nope")
	if err == nil || !strings.Contains(out, "404") {
		t.Fatalf("pause of an unknown trigger: %v, %q; want a 404", err, out)
	}
	out, err = sluiceCLI("trigger", "pause", "--addr", b.base, "--ops-token-file", token, "default/t")
	if err != nil || strings.TrimSpace(out) != "trigger default/t: paused" {
		t.Fatalf("pause: %v, %q", err, out)
	}
	for i := range n {
		if code, body := postBinary(t, b.base+"/default/default", ceHeaders(fmt.Sprintf("p%d", i), "e2e.pause"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, body)
		}
	}
	// Every event is stored and waits: the queue holds all of them, the subscriber none.
	sluicetest.Eventually(t, 30*time.Second, "all queued", func() bool { return opsMetric(t, b.base, tok, depth) == n })
	if got := sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events while the trigger was paused", got)
	}
	out, err = sluiceCLI("trigger", "resume", "--addr", b.base, "--ops-token-file", token, "default/t")
	if err != nil || strings.TrimSpace(out) != "trigger default/t: delivering" {
		t.Fatalf("resume: %v, %q", err, out)
	}
	sub.waitFor(t, n, 30*time.Second)
	sluicetest.Eventually(t, 30*time.Second, "queue empty", func() bool { return opsMetric(t, b.base, tok, depth) == 0 })
	if err := b.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range sub.all() {
		seen[r.Header.Get("Ce-Id")]++
	}
	if len(seen) != n || sub.count() != n {
		t.Errorf("subscriber got %d deliveries of %d events, want %d of %d", sub.count(), len(seen), n, n)
	}
}

// TestPauseAnnotationReload: a trigger annotated sluice.dev/paused: "true" delivers
// nothing while events are stored; the annotation removed (a hot reload), it delivers
// them all.
func TestPauseAnnotationReload(t *testing.T) {
	const n = 10
	sub := newSubscriber(t, nil)
	plain := brokerYAML("", [3]string{"t", "", sub.URL})
	paused := strings.Replace(plain, "metadata: {name: t, namespace: default}", `metadata: {name: t, namespace: default, annotations: {sluice.dev/paused: "true"}}`, 1)
	if paused == plain {
		t.Fatal("the annotation was not added")
	}
	cfg := writeConfig(t, paused)
	b := startBroker(t, "--config", cfg, "--reload-interval", "20ms")
	for i := range n {
		if code, body := postBinary(t, b.base+"/default/default", ceHeaders(fmt.Sprintf("a%d", i), "e2e.pause"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, body)
		}
	}
	sluicetest.Eventually(t, 30*time.Second, "all queued", func() bool {
		return b.metric(`sluice_queue_depth{broker="default/default",trigger="default/t"}`) == n
	})
	if got := sub.count(); got != 0 {
		t.Fatalf("subscriber got %d events while the trigger was paused", got)
	}
	replaceFile(t, cfg, plain)
	sub.waitFor(t, n, 30*time.Second)
	if err := b.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := sub.count(); got != n {
		t.Errorf("subscriber got %d events, want %d", got, n)
	}
}

// TestDedupWindowServe: with sluice.dev/dedup-window, the same (source, id) sent twice
// is answered 202 both times and delivered once.
func TestDedupWindowServe(t *testing.T) {
	sub := newSubscriber(t, nil)
	yaml := strings.Replace(brokerYAML("", [3]string{"t", "", sub.URL}),
		"metadata: {name: default, namespace: default}", `metadata: {name: default, namespace: default, annotations: {sluice.dev/dedup-window: "1h"}}`, 1)
	b := startBroker(t, "--config", writeConfig(t, yaml))
	for _, id := range []string{"same", "same", "other"} {
		if code, body := postBinary(t, b.base+"/default/default", ceHeaders(id, "e2e.dedup"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %s: %d %s", id, code, body)
		}
	}
	if got := b.metric(`sluice_events_deduplicated_total{broker="default/default"}`); got != 1 {
		t.Errorf("sluice_events_deduplicated_total %v, want 1", got)
	}
	sub.waitFor(t, 2, 30*time.Second)
	if err := b.stop(30 * time.Second); err != nil { // drains: every delivery has been made
		t.Fatal(err)
	}
	if got := sub.count(); got != 2 {
		t.Errorf("subscriber got %d events, want 2 (same once, other once)", got)
	}
}
