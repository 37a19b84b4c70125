package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// withRetention annotates the broker default of ns (a brokerYAMLIn) with
// sluice.dev/retention: 1h: on jetstream, its archive is where a trigger starting in the
// past reads.
func withRetention(ns, doc string) string {
	return strings.Replace(doc, "metadata: {name: default, namespace: "+ns+"}",
		"metadata: {name: default, namespace: "+ns+`, annotations: {sluice.dev/retention: "1h"}}`, 1)
}

// TestStartFromJetStream: TestStartFromKafka on the jetstream channel with
// sluice.dev/retention: triggers added to a broker that already stored events get, at
// earliest, the stored events their filter matches, at a time those stored from then on,
// without the annotation only the new ones; the broker is killed (-9) while the earliest
// one is catching up (its subscriber failing) and after the restart it gets every one.
func TestStartFromJetStream(t *testing.T) {
	ns := fmt.Sprintf("jsstartfrom%d", time.Now().UnixNano())
	var up atomic.Bool
	late := newSubscriber(t, func(*http.Request, int) int {
		if !up.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	})
	timed, plain, all := newSubscriber(t, nil), newSubscriber(t, nil), newSubscriber(t, nil)
	base := withRetention(ns, brokerYAMLIn(ns, "{retry: 1000, backoffPolicy: linear, backoffDelay: PT0.1S}", [3]string{"all", "", all.URL}))
	cfg := writeConfig(t, base)
	args := append([]string{"--config", cfg}, jetstreamArgs(t)...)
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
	// Deliveries are at-least-once (the kill may repeat some): wait for distinct ids.
	for _, w := range []struct {
		name string
		s    *subscriber
		n    int
	}{{"late", late, n + 3 + 2}, {"timed", timed, 3 + 2}, {"plain", plain, 2}} {
		sluicetest.Eventually(t, 90*time.Second, "trigger "+w.name+"'s events", func() bool { return len(distinctIDs(w.s)) >= w.n })
	}
	time.Sleep(time.Second) // anything more would come now
	checkIDs(t, "late (earliest)", late, seqIDs("old", n), seqIDs("mid", 3), seqIDs("new", 2))
	checkIDs(t, "timed", timed, seqIDs("mid", 3), seqIDs("new", 2))
	checkIDs(t, "plain", plain, seqIDs("new", 2))
}

// TestStartFromJetStreamNeedsRetention: on a jetstream broker without
// sluice.dev/retention a trigger annotated sluice.dev/start-from: earliest fails to
// start, its reason naming both annotations.
func TestStartFromJetStreamNeedsRetention(t *testing.T) {
	ns := fmt.Sprintf("jsstartnoret%d", time.Now().UnixNano())
	sub := newSubscriber(t, nil)
	doc := strings.Replace(brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}),
		"metadata: {name: t, namespace: "+ns+"}", "metadata: {name: t, namespace: "+ns+`, annotations: {sluice.dev/start-from: earliest}}`, 1)
	if !strings.Contains(doc, "sluice.dev/start-from") {
		t.Fatalf("the trigger was not annotated:\n%s", doc)
	}
	b := startBroker(t, append([]string{"--config", writeConfig(t, doc)}, jetstreamArgs(t)...)...)
	sluicetest.Eventually(t, 30*time.Second, "the refusal in the log", func() bool {
		l := b.logs.String()
		return strings.Contains(l, "from earliest") && strings.Contains(l, "sluice.dev/retention, and the broker has none")
	})
}

// TestRecreatedTriggerResumesJetStream: TestRecreatedTriggerResumesKafka on the
// jetstream channel with sluice.dev/retention: a trigger removed by a reload and added
// back with the same name gets the events its filter matches that were stored while it
// was gone, and not the ones it had delivered before.
func TestRecreatedTriggerResumesJetStream(t *testing.T) {
	ns := fmt.Sprintf("jsrecreate%d", time.Now().UnixNano())
	sub, all := newSubscriber(t, nil), newSubscriber(t, nil)
	without := withRetention(ns, brokerYAMLIn(ns, "", [3]string{"all", "", all.URL}))
	with := withRetention(ns, brokerYAMLIn(ns, "", [3]string{"all", "", all.URL}, [3]string{"t", "e2e.b", sub.URL}))
	cfg := writeConfig(t, with)
	b := startBroker(t, append([]string{"--config", cfg}, jetstreamArgs(t)...)...)
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
	sluicetest.Eventually(t, 30*time.Second, "the trigger back", func() bool { return strings.Contains(b.logs.String(), "resumes where that one stopped") })
	postN(t, url, "back", "e2e.b", 2)
	sluicetest.Eventually(t, 60*time.Second, "the re-created trigger's events", func() bool { return len(distinctIDs(sub)) >= 3+4+2 })
	time.Sleep(time.Second) // anything more would come now
	seen := map[string]int{}
	for _, r := range sub.all() {
		seen[r.Header.Get("Ce-Id")]++
	}
	for id, k := range seen {
		if strings.HasPrefix(id, "before") && k != 1 {
			t.Errorf("trigger t got %s %d times: re-created, it did not resume where it stopped", id, k)
		}
	}
	checkIDs(t, "t", sub, seqIDs("before", 3), seqIDs("gone", 4), seqIDs("back", 2))
}

// distinctIDs returns the ids s received.
func distinctIDs(s *subscriber) map[string]bool {
	out := map[string]bool{}
	for _, r := range s.all() {
		out[r.Header.Get("Ce-Id")] = true
	}
	return out
}

// seqIDs returns prefix0 .. prefix<k-1>, the ids postN sends.
func seqIDs(prefix string, k int) []string {
	var out []string
	for i := range k {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// checkIDs fails t unless s received exactly the ids of want.
func checkIDs(t *testing.T, name string, s *subscriber, want ...[]string) {
	t.Helper()
	got, exp := distinctIDs(s), map[string]bool{}
	for _, w := range want {
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
