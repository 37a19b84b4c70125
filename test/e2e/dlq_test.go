package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// dlqSetup is a trigger <ns>/t with no retry and no dead-letter sink, toward a
// subscriber that answers 500 until up is set, and an operator token file.
type dlqSetup struct {
	ns    string // the broker's namespace; the trigger is <ns>/t
	sub   *subscriber
	up    *atomic.Bool
	cfg   string
	token string
}

// dlqPage is what the test reads of `sluice dlq list -o json` (GET .../dlq).
type dlqPage struct {
	Durable bool
	Total   int
	Entries []struct {
		Attempts int
		Code     int
		Dest     string
		Event    json.RawMessage
	}
}

// newDLQSetupIn makes a dlqSetup for a broker in namespace ns; hold, when not nil, is
// asked before each answer of the subscriber once up, and may block.
func newDLQSetupIn(t *testing.T, ns string, hold func() int) dlqSetup {
	var up atomic.Bool
	sub := newSubscriber(t, func(*http.Request, int) int {
		if !up.Load() {
			return http.StatusInternalServerError
		}
		if hold != nil {
			return hold()
		}
		return http.StatusAccepted
	})
	token := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dlqSetup{ns: ns, sub: sub, up: &up, cfg: writeConfig(t, brokerYAMLIn(ns, "{retry: 0}", [3]string{"t", "", sub.URL})), token: token}
}

// trigger is the setup's trigger, "<ns>/t".
func (s dlqSetup) trigger() string { return s.ns + "/t" }

// list runs `sluice dlq list -o json` (a page of up to 1000) and decodes it.
func (s dlqSetup) list(t *testing.T, b *broker) dlqPage {
	t.Helper()
	out, err := sluiceCLI("dlq", "list", "--addr", b.base, "--ops-token-file", s.token, "--trigger", s.trigger(), "-o", "json", "--limit", "1000")
	if err != nil {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	var p dlqPage
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("dlq list -o json: %v\n%s", err, out)
	}
	return p
}

// sendN posts n events <prefix>0..<prefix><n-1> to the setup's broker.
func (s dlqSetup) sendN(t *testing.T, b *broker, prefix string, n int) {
	t.Helper()
	for i := range n {
		if code, body := postBinary(t, b.base+"/"+s.ns+"/default", ceHeaders(fmt.Sprintf("%s%d", prefix, i), "e2e.dlq"), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, body)
		}
	}
}

// eventIDs returns the ce ids of p's entries.
func eventIDs(t *testing.T, p dlqPage) map[string]bool {
	ids := map[string]bool{}
	for _, e := range p.Entries {
		var ev struct{ ID string }
		if err := json.Unmarshal(e.Event, &ev); err != nil {
			t.Fatal(err)
		}
		ids[ev.ID] = true
	}
	return ids
}

// TestDLQMemory and TestDLQJetStream: events that fail without a dead-letter sink are
// kept and listed with why; redrive needs the token, delivers every one once the
// subscriber is back and empties the store; purge empties it too.
func TestDLQMemory(t *testing.T) { runDLQ(t, "default", false) }

func TestDLQJetStream(t *testing.T) { runDLQ(t, "default", true, jetstreamArgs(t)...) }

// TestDLQKafka is TestDLQJetStream on Kafka, in a namespace (so topics) of its own.
func TestDLQKafka(t *testing.T) {
	runDLQ(t, fmt.Sprintf("dlq%d", time.Now().UnixNano()), true, kafkaArgs(t)...)
}

func runDLQ(t *testing.T, ns string, durable bool, args ...string) {
	const n = 30
	s := newDLQSetupIn(t, ns, nil)
	b := startBroker(t, append([]string{"--config", s.cfg, "--ops-token-file", s.token}, args...)...)
	s.sendN(t, b, "d", n)
	sluicetest.Eventually(t, 60*time.Second, "all dead-lettered", func() bool { return s.list(t, b).Total == n })
	p := s.list(t, b)
	if len(eventIDs(t, p)) != n || p.Durable != durable {
		t.Fatalf("listed %d distinct events, durable %v; want %d, %v", len(eventIDs(t, p)), p.Durable, n, durable)
	}
	if e := p.Entries[0]; e.Attempts != 1 || e.Code != 500 || e.Dest != s.sub.URL {
		t.Fatalf("entry %+v; want 1 attempt, 500 from %s", e, s.sub.URL)
	}
	out, err := sluiceCLI("dlq", "list", "--addr", b.base, "--ops-token-file", s.token, "--trigger", s.trigger(), "--limit", "2")
	if err != nil || !strings.Contains(out, fmt.Sprintf("trigger %s: %d dead letters", s.trigger(), n)) || !strings.Contains(out, "more: --after") {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	if out, err := sluiceCLI("dlq", "redrive", "--addr", b.base, "--trigger", s.trigger()); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("redrive without the token: %v, %q; want a 401", err, out)
	}

	s.up.Store(true)
	out, err = sluiceCLI("dlq", "redrive", "--addr", b.base, "--ops-token-file", s.token, "--trigger", s.trigger(), "--rate", "200")
	if err != nil || !strings.Contains(out, fmt.Sprintf("redriving %d dead letters at 200/s", n)) {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	s.sub.waitFor(t, n, 60*time.Second)
	sluicetest.Eventually(t, 60*time.Second, "store empty", func() bool { return s.list(t, b).Total == 0 })
	seen := map[string]bool{}
	for _, r := range s.sub.all() {
		seen[r.Header.Get("Ce-Id")] = true
	}
	if len(seen) != n {
		t.Fatalf("redrive delivered %d distinct events; want %d", len(seen), n)
	}
	if v := opsMetric(t, b.base, "0123456789abcdef0123456789abcdef", `sluice_dlq_redriven_total{trigger="`+s.trigger()+`"}`); v != n {
		t.Errorf("sluice_dlq_redriven_total = %v; want %d", v, n)
	}

	s.up.Store(false)
	s.sendN(t, b, "p", 3)
	sluicetest.Eventually(t, 60*time.Second, "3 more dead-lettered", func() bool { return s.list(t, b).Total == 3 })
	out, err = sluiceCLI("dlq", "purge", "--addr", b.base, "--ops-token-file", s.token, "--trigger", s.trigger())
	if err != nil || strings.TrimSpace(out) != "trigger "+s.trigger()+": 3 dead letters purged" || s.list(t, b).Total != 0 {
		t.Fatalf("purge: %v\n%s", err, out)
	}
}

// TestDLQJetStreamKilledMidRedrive: kill -9 of the broker in the middle of a slow
// redrive on the embedded JetStream loses nothing: after the restart, every event is
// either delivered or still in the store, and a second redrive delivers the rest.
func TestDLQJetStreamKilledMidRedrive(t *testing.T) {
	runDLQKilledMidRedrive(t, "default", jetstreamArgs(t)...)
}

// TestDLQKafkaKilledMidRedrive is TestDLQJetStreamKilledMidRedrive on Kafka, in a
// namespace (so topics) of its own.
func TestDLQKafkaKilledMidRedrive(t *testing.T) {
	runDLQKilledMidRedrive(t, fmt.Sprintf("dlqkill%d", time.Now().UnixNano()), kafkaArgs(t)...)
}

func runDLQKilledMidRedrive(t *testing.T, ns string, channelArgs ...string) {
	const n = 40
	// Once up, the subscriber takes the first 5 events, then holds every request
	// unanswered until the broker is dead (and answers it 500 then, to nobody): the
	// redriven events in flight at the kill are not delivered, and must still be in the
	// store after the restart. After that it takes everything.
	var taken atomic.Int64
	var afterKill atomic.Bool
	release := make(chan struct{})
	t.Cleanup(func() {
		if !afterKill.Load() {
			close(release)
		}
	})
	s := newDLQSetupIn(t, ns, func() int {
		if afterKill.Load() || taken.Add(1) <= 5 {
			return http.StatusAccepted
		}
		<-release
		return http.StatusInternalServerError
	})
	args := append([]string{"--config", s.cfg, "--ops-token-file", s.token}, channelArgs...)
	b := startBroker(t, args...)
	s.sendN(t, b, "k", n)
	sluicetest.Eventually(t, 60*time.Second, "all dead-lettered", func() bool { return s.list(t, b).Total == n })

	s.up.Store(true)
	if out, err := sluiceCLI("dlq", "redrive", "--addr", b.base, "--ops-token-file", s.token, "--trigger", s.trigger(), "--rate", "5"); err != nil {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	s.sub.waitFor(t, 5, 60*time.Second)
	sluicetest.Eventually(t, 60*time.Second, "redriven events held in flight", func() bool { return taken.Load() >= 7 })
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	afterKill.Store(true)
	close(release)
	delivered := map[string]bool{}
	for _, r := range s.sub.all() {
		delivered[r.Header.Get("Ce-Id")] = true
	}
	if len(delivered) >= n {
		t.Fatalf("the redrive delivered all %d before the kill; the test wants it killed midway", n)
	}

	b2 := startBroker(t, args...)
	p := s.list(t, b2)
	kept := eventIDs(t, p)
	for i := range n {
		id := fmt.Sprintf("k%d", i)
		if !delivered[id] && !kept[id] {
			t.Errorf("event %s was neither delivered nor kept after the kill", id)
		}
	}
	// Each delivered one left the store as its delivery was settled; one whose answer
	// came just before the kill may still be there (delivered twice, never lost).
	if p.Total < n-len(delivered) || p.Total > n {
		t.Fatalf("after the kill the store holds %d; want the %d not delivered", p.Total, n-len(delivered))
	}
	if out, err := sluiceCLI("dlq", "redrive", "--addr", b2.base, "--ops-token-file", s.token, "--trigger", s.trigger(), "--rate", "1000"); err != nil {
		t.Fatalf("second redrive: %v\n%s", err, out)
	}
	sluicetest.Eventually(t, 60*time.Second, "store empty", func() bool { return s.list(t, b2).Total == 0 })
	for _, r := range s.sub.all() {
		delivered[r.Header.Get("Ce-Id")] = true
	}
	if len(delivered) != n {
		t.Fatalf("delivered %d distinct events in all; want %d", len(delivered), n)
	}
}

// TestDLQJetStreamReplicasShareStore: two replicas on one external NATS server share a
// trigger's dead-letter store: what either kept, the other lists and redrives, and the
// redrive empties it for both.
func TestDLQJetStreamReplicasShareStore(t *testing.T) {
	ns := natsAt(t, server.RANDOM_PORT, t.TempDir())
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	runDLQReplicasShareStore(t, "default", "--channel", "jetstream", "--nats-url", url, "--jetstream-replicas", "1")
}

// TestDLQKafkaReplicasShareStore is TestDLQJetStreamReplicasShareStore on Kafka: two
// replicas of one broker on one cluster, in a namespace (so topics) of its own.
func TestDLQKafkaReplicasShareStore(t *testing.T) {
	runDLQReplicasShareStore(t, fmt.Sprintf("dlqrep%d", time.Now().UnixNano()), kafkaArgs(t)...)
}

func runDLQReplicasShareStore(t *testing.T, ns string, channelArgs ...string) {
	const n = 20
	s := newDLQSetupIn(t, ns, nil)
	args := append([]string{"--config", s.cfg, "--ops-token-file", s.token}, channelArgs...)
	a, b := startBroker(t, args...), startBroker(t, args...)
	s.sendN(t, a, "r", n/2)
	s.sendN(t, b, "s", n/2)
	sluicetest.Eventually(t, 60*time.Second, "all dead-lettered", func() bool { return s.list(t, b).Total == n })
	if p := s.list(t, a); p.Total != n || len(eventIDs(t, p)) != n || !p.Durable {
		t.Fatalf("replica a lists %d (%d distinct, durable %v); want the same %d as b", p.Total, len(eventIDs(t, p)), p.Durable, n)
	}
	s.up.Store(true)
	if out, err := sluiceCLI("dlq", "redrive", "--addr", b.base, "--ops-token-file", s.token, "--trigger", s.trigger(), "--rate", "1000"); err != nil {
		t.Fatalf("redrive on b: %v\n%s", err, out)
	}
	s.sub.waitFor(t, n, 60*time.Second)
	sluicetest.Eventually(t, 60*time.Second, "a sees the store empty", func() bool { return s.list(t, a).Total == 0 })
}
