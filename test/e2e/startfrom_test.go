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

// startFromChannel is a channel on which a trigger can start in the past
// (sluice.dev/start-from) and a re-created trigger resumes, with what it needs.
type startFromChannel struct {
	name string
	args func(t *testing.T) []string // the broker's channel flags (skip t when the channel is not there)
	// broker annotates the broker default of ns in doc (a brokerYAMLIn); nil: as it is.
	broker func(ns, doc string) string
	// resumed is a log line to wait for, once a removed trigger is back, before the events
	// it should get from then on are posted; "": none.
	resumed string
}

// startFromChannels are the channels the start-from tests run on: kafka, jetstream (with
// sluice.dev/retention, where its catch-up reads), kinesis with checkpoint files and with
// a lease table.
func startFromChannels() []startFromChannel {
	return []startFromChannel{
		{name: "kafka", args: kafkaArgs},
		{name: "jetstream", args: jetstreamArgs, broker: withRetention, resumed: "resumes where that one stopped"},
		{name: "kinesis", args: kinesisArgs},
		{name: "kinesis-leased", args: leasedKinesisArgs},
	}
}

// doc is the broker configuration doc of ns annotated for the channel.
func (c startFromChannel) doc(ns, doc string) string {
	if c.broker == nil {
		return doc
	}
	return c.broker(ns, doc)
}

// withRetention annotates the broker default of ns (a brokerYAMLIn) with
// sluice.dev/retention: 1h: on jetstream, its archive is where a trigger starting in the
// past reads.
func withRetention(ns, doc string) string {
	return strings.Replace(doc, "metadata: {name: default, namespace: "+ns+"}",
		"metadata: {name: default, namespace: "+ns+`, annotations: {sluice.dev/retention: "1h"}}`, 1)
}

// leasedKinesisArgs are kinesisArgs with a lease table of their own (the servers of
// scripts/kinesis.sh and scripts/dynalite.sh) instead of a checkpoint directory.
func leasedKinesisArgs(t *testing.T) []string {
	args := kinesisArgs(t)
	args = args[:len(args)-2] // its --kinesis-checkpoint-dir: the lease table holds the checkpoints
	return append(args, "--kinesis-lease-table", fmt.Sprintf("sluice-e2e-%d", time.Now().UnixNano()),
		"--dynamodb-endpoint", kinesistest.DynamoDBEndpoint(t))
}

// TestStartFrom: on each channel that can (startFromChannels), triggers added to a
// broker that already stored events: one annotated sluice.dev/start-from: earliest gets
// the stored events its filter matches (they were stored for another trigger, before it
// existed), one with a time gets those stored from then on, one without the annotation
// only the new ones. The broker is killed (-9) while the earliest one is catching up
// (its subscriber failing): after the restart it gets every one of them, then the live
// ones, and each trigger gets no other.
func TestStartFrom(t *testing.T) {
	for _, ch := range startFromChannels() {
		t.Run(ch.name, func(t *testing.T) {
			runStartFrom(t, ch, fmt.Sprintf("startfrom%d", time.Now().UnixNano()))
		})
	}
}

func runStartFrom(t *testing.T, ch startFromChannel, ns string) {
	var up atomic.Bool
	late := newSubscriber(t, func(*http.Request, int) int {
		if !up.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	})
	timed, plain, all := newSubscriber(t, nil), newSubscriber(t, nil), newSubscriber(t, nil)
	base := ch.doc(ns, brokerYAMLIn(ns, "{retry: 1000, backoffPolicy: linear, backoffDelay: PT0.1S}", [3]string{"all", "", all.URL}))
	cfg := writeConfig(t, base)
	args := append([]string{"--config", cfg}, ch.args(t)...)
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

// TestRecreatedTriggerResumes: on each channel that can (startFromChannels), a trigger
// removed by a reload and added back with the same name resumes where it stopped: it
// gets the events its filter matches that were stored (for another trigger) while it
// was gone, then the new ones, and not the ones it had delivered before.
func TestRecreatedTriggerResumes(t *testing.T) {
	for _, ch := range startFromChannels() {
		t.Run(ch.name, func(t *testing.T) {
			runRecreated(t, ch, fmt.Sprintf("recreate%d", time.Now().UnixNano()))
		})
	}
}

func runRecreated(t *testing.T, ch startFromChannel, ns string) {
	sub, all := newSubscriber(t, nil), newSubscriber(t, nil)
	without := ch.doc(ns, brokerYAMLIn(ns, "", [3]string{"all", "", all.URL}))
	with := ch.doc(ns, brokerYAMLIn(ns, "", [3]string{"all", "", all.URL}, [3]string{"t", "e2e.b", sub.URL}))
	cfg := writeConfig(t, with)
	b := startBroker(t, append([]string{"--config", cfg}, ch.args(t)...)...)
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
	if ch.resumed != "" {
		sluicetest.Eventually(t, 30*time.Second, "the trigger back", func() bool { return strings.Contains(b.logs.String(), ch.resumed) })
	}
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
