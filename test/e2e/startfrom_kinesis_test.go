package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestStartFromKinesis is TestStartFromKafka on the Kinesis channel (checkpoint files):
// triggers new to the channel start at earliest, at a time and at latest, the first
// two re-running their filter on the events stored before they existed; the broker is
// killed (SIGKILL) while the earliest one catches up, and after the restart each has
// the events it should, and no other.
func TestStartFromKinesis(t *testing.T) {
	runStartFromKinesis(t, fmt.Sprintf("kstartfrom%d", time.Now().UnixNano()), kinesisArgs(t))
}

// TestStartFromKinesisLeased is TestStartFromKinesis with a lease table (the servers of
// scripts/kinesis.sh and scripts/dynalite.sh): the catch-up is an item of the table.
func TestStartFromKinesisLeased(t *testing.T) {
	runStartFromKinesis(t, fmt.Sprintf("kstartleased%d", time.Now().UnixNano()), leasedKinesisArgs(t))
}

// leasedKinesisArgs are kinesisArgs with a lease table of their own instead of a
// checkpoint directory.
func leasedKinesisArgs(t *testing.T) []string {
	args := kinesisArgs(t)
	args = args[:len(args)-2] // its --kinesis-checkpoint-dir: the lease table holds the checkpoints
	return append(args, "--kinesis-lease-table", fmt.Sprintf("sluice-e2e-%d", time.Now().UnixNano()),
		"--dynamodb-endpoint", kinesistest.DynamoDBEndpoint(t))
}

func runStartFromKinesis(t *testing.T, ns string, chArgs []string) {
	var up atomic.Bool
	late := newSubscriber(t, func(*http.Request, int) int {
		if !up.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	})
	timed, plain, all := newSubscriber(t, nil), newSubscriber(t, nil), newSubscriber(t, nil)
	base := brokerYAMLIn(ns, "{retry: 1000, backoffPolicy: linear, backoffDelay: PT0.1S}", [3]string{"all", "", all.URL})
	cfg := writeConfig(t, base)
	args := append([]string{"--config", cfg}, chArgs...)
	b := startBroker(t, args...)
	url := b.base + "/" + ns + "/default"
	const n = 10
	postN(t, url, "old", "e2e.b", n)
	postN(t, url, "x", "e2e.other", 5)
	time.Sleep(1100 * time.Millisecond) // a second apart: the time start falls between
	mid := time.Now().UTC().Format(time.RFC3339)
	time.Sleep(1100 * time.Millisecond)
	postN(t, url, "mid", "e2e.b", 3)
	all.waitFor(t, n+5+3, 60*time.Second)
	if err := b.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	trigger := func(name, url, start string) string {
		ann := ""
		if start != "" {
			ann = `, annotations: {sluice.dev/start-from: "` + start + `"}`
		}
		return fmt.Sprintf("---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: %s, namespace: %s%s}\nspec:\n  broker: default\n  filter: {attributes: {type: e2e.b}}\n  subscriber: {uri: %q}\n", name, ns, ann, url)
	}
	replaceFile(t, cfg, base+trigger("late", late.URL, "earliest")+trigger("timed", timed.URL, mid)+trigger("plain", plain.URL, ""))
	b = startBroker(t, args...)
	sluicetest.Eventually(t, 60*time.Second, "the earliest trigger to try its catch-up", func() bool { return late.calls.Load() >= 5 })
	timed.waitFor(t, 3, 60*time.Second)
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	up.Store(true)
	b = startBroker(t, args...)
	url = b.base + "/" + ns + "/default"
	postN(t, url, "new", "e2e.b", 2)
	ids := func(s *subscriber) map[string]bool {
		out := map[string]bool{}
		for _, r := range s.all() {
			out[r.Header.Get("Ce-Id")] = true
		}
		return out
	}
	want := func(prefix string, k int) []string {
		var out []string
		for i := range k {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	// Deliveries are at-least-once (the kill may repeat some): wait for distinct ids.
	for _, w := range []struct {
		name string
		s    *subscriber
		n    int
	}{{"late", late, n + 3 + 2}, {"timed", timed, 3 + 2}, {"plain", plain, 2}} {
		sluicetest.Eventually(t, 90*time.Second, "trigger "+w.name+"'s events", func() bool { return len(ids(w.s)) >= w.n })
	}
	check := func(name string, s *subscriber, wantIDs ...[]string) {
		t.Helper()
		got, exp := ids(s), map[string]bool{}
		for _, w := range wantIDs {
			for _, id := range w {
				exp[id] = true
				if !got[id] {
					t.Errorf("trigger %s did not get %s", name, id)
				}
			}
		}
		for id := range got {
			if !exp[id] {
				t.Errorf("trigger %s got %s, which it should not", name, id)
			}
		}
	}
	check("late (earliest)", late, want("old", n), want("mid", 3), want("new", 2))
	check("timed", timed, want("mid", 3), want("new", 2))
	check("plain", plain, want("new", 2))
}

// TestRecreatedTriggerResumesKinesis: on the Kinesis channel (checkpoint files) a trigger removed by a reload
// and added back with the same name resumes where it stopped: it gets the events its
// filter matches that were stored (for another trigger) while it was gone, and not the
// ones it had delivered before.
func TestRecreatedTriggerResumesKinesis(t *testing.T) {
	runRecreatedKinesis(t, fmt.Sprintf("krecreate%d", time.Now().UnixNano()), kinesisArgs(t))
}

// TestRecreatedTriggerResumesKinesisLeased is TestRecreatedTriggerResumesKinesis with a
// lease table: the removed trigger's position is an item of the table.
func TestRecreatedTriggerResumesKinesisLeased(t *testing.T) {
	runRecreatedKinesis(t, fmt.Sprintf("krecreateleased%d", time.Now().UnixNano()), leasedKinesisArgs(t))
}

func runRecreatedKinesis(t *testing.T, ns string, chArgs []string) {
	sub, all := newSubscriber(t, nil), newSubscriber(t, nil)
	without := brokerYAMLIn(ns, "", [3]string{"all", "", all.URL})
	with := brokerYAMLIn(ns, "", [3]string{"all", "", all.URL}, [3]string{"t", "e2e.b", sub.URL})
	cfg := writeConfig(t, with)
	b := startBroker(t, append([]string{"--config", cfg}, chArgs...)...)
	url := b.base + "/" + ns + "/default"
	postN(t, url, "before", "e2e.b", 3)
	sub.waitFor(t, 3, 60*time.Second)
	all.waitFor(t, 3, 60*time.Second)

	replaceFile(t, cfg, without)
	sluicetest.Eventually(t, 30*time.Second, "the trigger removed", func() bool { return strings.Contains(b.logs.String(), "trigger removed") })
	postN(t, url, "gone", "e2e.b", 4)
	postN(t, url, "other", "e2e.other", 2)
	all.waitFor(t, 3+4+2, 60*time.Second)

	replaceFile(t, cfg, with)
	postN(t, url, "back", "e2e.b", 2)
	sluicetest.Eventually(t, 60*time.Second, "the re-created trigger's events", func() bool {
		got := map[string]bool{}
		for _, r := range sub.all() {
			got[r.Header.Get("Ce-Id")] = true
		}
		return len(got) >= 3+4+2
	})
	time.Sleep(time.Second) // anything more would come now
	seen := map[string]int{}
	for _, r := range sub.all() {
		seen[r.Header.Get("Ce-Id")]++
	}
	for id, n := range seen {
		if !strings.HasPrefix(id, "before") && !strings.HasPrefix(id, "gone") && !strings.HasPrefix(id, "back") {
			t.Errorf("trigger t got %s, which its filter does not match", id)
		}
		if strings.HasPrefix(id, "before") && n != 1 {
			t.Errorf("trigger t got %s %d times: re-created, it did not resume where it stopped", id, n)
		}
	}
	if len(seen) != 3+4+2 {
		t.Errorf("trigger t got %d distinct events, want 9: %v", len(seen), seen)
	}
}
