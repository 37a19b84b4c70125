package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// opsToken writes an operator token file and returns its path and the token.
func opsToken(t *testing.T) (string, string) {
	t.Helper()
	const tok = "fedcba9876543210fedcba9876543210"
	p := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, tok
}

// replayIDs counts a subscriber's deliveries by ce-id, separately for those marked with
// the sluicereplay extension and the others.
func replayIDs(s *subscriber) (live, replayed map[string]int) {
	live, replayed = map[string]int{}, map[string]int{}
	for _, r := range s.all() {
		if r.Header.Get("Ce-Sluicereplay") != "" {
			replayed[r.Header.Get("Ce-Id")]++
		} else {
			live[r.Header.Get("Ce-Id")]++
		}
	}
	return live, replayed
}

// postN posts n events of type typ to url, ids prefix0..prefix(n-1), each must get 202.
func postN(t *testing.T, url, prefix, typ string, n int) {
	t.Helper()
	for i := range n {
		if code, body := postBinary(t, url, ceHeaders(fmt.Sprintf("%s%d", prefix, i), typ), []byte(`{}`)); code != http.StatusAccepted {
			t.Fatalf("event %s%d: %d %s", prefix, i, code, body)
		}
	}
}

// TestReplayKafka: on the Kafka channel, `sluice replay` re-delivers a trigger's stored
// events of the window, through its filter (the other trigger's events are not sent),
// each marked with ce-sluicereplay, and prints how many. A paused trigger's replay waits
// (nothing is re-delivered) and a second replay meanwhile is refused with 409; a window
// before the topic's retention is refused with 400 naming the retention; an unknown
// trigger gets 404.
func TestReplayKafka(t *testing.T) {
	ns := fmt.Sprintf("replay%d", time.Now().UnixNano())
	subA, subB := newSubscriber(t, nil), newSubscriber(t, nil)
	token, _ := opsToken(t)
	cfg := writeConfig(t, brokerYAMLIn(ns, "", [3]string{"a", "e2e.keep", subA.URL}, [3]string{"b", "e2e.other", subB.URL}))
	b := startBroker(t, append([]string{"--config", cfg, "--ops-token-file", token}, kafkaArgs(t)...)...)
	url := b.base + "/" + ns + "/default"
	from := time.Now().Add(-2 * time.Second).UTC().Format(time.RFC3339)
	const nKeep, nOther = 20, 10
	postN(t, url, "k", "e2e.keep", nKeep)
	postN(t, url, "o", "e2e.other", nOther)
	subA.waitFor(t, nKeep, 60*time.Second)
	subB.waitFor(t, nOther, 60*time.Second)

	trig := ns + "/a"
	out, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--rate", "1000")
	if err != nil || !strings.Contains(out, fmt.Sprintf("complete: %d events re-delivered", nKeep)) {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	live, replayed := replayIDs(subA)
	if len(live) != nKeep || len(replayed) != nKeep {
		t.Fatalf("trigger a got %d live and %d replayed events, want %d and %d", len(live), len(replayed), nKeep, nKeep)
	}
	for id, n := range replayed {
		if !strings.HasPrefix(id, "k") || n != 1 {
			t.Errorf("replayed event %s delivered %d times; want events k* once", id, n)
		}
	}
	if got := subB.count(); got != nOther {
		t.Errorf("trigger b got %d events, want %d: the replay of a reached it", got, nOther)
	}

	// Refusals: unknown trigger, before retention (Kafka's default of 168h).
	old := time.Now().Add(-200 * time.Hour).UTC().Format(time.RFC3339)
	if out, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", old); err == nil || !strings.Contains(out, "400") || !strings.Contains(out, "retention") {
		t.Errorf("replay beyond retention: %v, %q; want a 400 naming the retention", err, out)
	}
	if out, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", ns+"/nope", "--from", from); err == nil || !strings.Contains(out, "404") {
		t.Errorf("replay of an unknown trigger: %v, %q; want a 404", err, out)
	}

	// Paused: the replay waits; a second one is refused.
	if out, err := sluiceCLI("trigger", "pause", "--addr", b.base, "--ops-token-file", token, trig); err != nil {
		t.Fatalf("pause: %v %s", err, out)
	}
	before := subA.count()
	first := exec.Command(sluiceBin, "replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--rate", "1000")
	var firstOut syncbuf.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Wait() }()
	sluicetest.Eventually(t, 30*time.Second, "the first replay to report progress", func() bool {
		return strings.Contains(firstOut.String(), "matched")
	})
	out, err = sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from)
	if err == nil || !strings.Contains(out, "409") {
		t.Errorf("second replay while one runs: %v, %q; want a 409", err, out)
	}
	if got := subA.count(); got != before {
		t.Errorf("paused trigger got %d replayed events", got-before)
	}
	if out, err := sluiceCLI("trigger", "resume", "--addr", b.base, "--ops-token-file", token, trig); err != nil {
		t.Fatalf("resume: %v %s", err, out)
	}
	select {
	case err := <-firstDone:
		if err != nil || !strings.Contains(firstOut.String(), fmt.Sprintf("complete: %d events re-delivered", nKeep)) {
			t.Fatalf("replay after resume: %v\n%s", err, firstOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("replay did not end 60s after resume:\n%s", firstOut.String())
	}
	if _, replayed := replayIDs(subA); len(replayed) != nKeep {
		t.Errorf("after two replays: %d distinct replayed events, want %d", len(replayed), nKeep)
	}
}

// TestReplayMemoryRefused: on a memory channel a replay is refused with 400 saying the
// channel does not replay, and so on a jetstream broker without sluice.dev/retention;
// without --ops-token-file, 403.
func TestReplayMemoryRefused(t *testing.T) {
	sub := newSubscriber(t, nil)
	token, _ := opsToken(t)
	cfg := writeConfig(t, brokerYAML("", [3]string{"t", "", sub.URL}))
	b := startBroker(t, "--config", cfg, "--ops-token-file", token)
	from := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	out, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", "default/t", "--from", from)
	if err == nil || !strings.Contains(out, "400") || !strings.Contains(out, "does not replay") {
		t.Errorf("replay on memory: %v, %q; want a 400 saying the channel does not replay", err, out)
	}
	js := startBroker(t, append([]string{"--config", cfg, "--ops-token-file", token}, jetstreamArgs(t)...)...)
	out, err = sluiceCLI("replay", "--addr", js.base, "--ops-token-file", token, "--trigger", "default/t", "--from", from)
	if err == nil || !strings.Contains(out, "400") || !strings.Contains(out, "without the broker's sluice.dev/retention") {
		t.Errorf("replay on jetstream without retention: %v, %q; want a 400 naming sluice.dev/retention", err, out)
	}
	open := startBroker(t, "--config", cfg)
	out, err = sluiceCLI("replay", "--addr", open.base, "--trigger", "default/t", "--from", from)
	if err == nil || !strings.Contains(out, "403") {
		t.Errorf("replay without an operator token: %v, %q; want a 403", err, out)
	}
}

// TestReplayKafkaKill9: kill -9 of the broker in the middle of a replay. The replay is
// not resumed: `sluice replay` exits non-zero, saying it is incomplete and how many
// events were re-delivered (no more than the subscriber got). Nothing is lost: the live
// events accepted during the replay are all delivered after the restart, and the stored
// events are all still there: a second replay re-delivers every one of them.
func TestReplayKafkaKill9(t *testing.T) {
	runReplayKill9(t, fmt.Sprintf("replaykill%d", time.Now().UnixNano()), kafkaArgs(t)...)
}

// TestReplayKinesisKill9 is TestReplayKafkaKill9 on the Kinesis channel (the
// Kinesis-compatible server of scripts/kinesis.sh), same checkpoint directory across
// the restart.
func TestReplayKinesisKill9(t *testing.T) {
	runReplayKill9(t, fmt.Sprintf("replaykill%d", time.Now().UnixNano()), kinesisArgs(t)...)
}

// TestReplayJetStreamKill9 is TestReplayKafkaKill9 on the embedded JetStream channel,
// whose broker needs sluice.dev/retention to keep its events (an archive stream), same
// data directory across the restart.
func TestReplayJetStreamKill9(t *testing.T) {
	runReplayKill9(t, fmt.Sprintf("replaykill%d", time.Now().UnixNano()), jetstreamArgs(t)...)
}

// runReplayKill9 runs the kill -9 replay test on a broker annotated sluice.dev/retention
// 1h in namespace ns, served with channelArgs.
func runReplayKill9(t *testing.T, ns string, channelArgs ...string) {
	sub := newSubscriber(t, nil)
	token, _ := opsToken(t)
	cfg := writeConfig(t, strings.Replace(brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}),
		"metadata: {name: default, namespace: "+ns+"}", "metadata: {name: default, namespace: "+ns+`, annotations: {sluice.dev/retention: "1h"}}`, 1))
	args := append([]string{"--config", cfg, "--ops-token-file", token}, channelArgs...)
	b := startBroker(t, args...)
	url := b.base + "/" + ns + "/default"
	from := time.Now().Add(-2 * time.Second).UTC().Format(time.RFC3339)
	const n, nLive = 200, 30
	postN(t, url, "s", "e2e.stored", n)
	sub.waitFor(t, n, 60*time.Second)
	to := time.Now().Add(time.Second).UTC().Format(time.RFC3339)
	time.Sleep(1100 * time.Millisecond) // the live events below are after --to

	trig := ns + "/t"
	rp := exec.Command(sluiceBin, "replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--to", to, "--rate", "20")
	var rpOut syncbuf.Buffer
	rp.Stdout, rp.Stderr = &rpOut, &rpOut
	if err := rp.Start(); err != nil {
		t.Fatal(err)
	}
	rpDone := make(chan error, 1)
	go func() { rpDone <- rp.Wait() }()
	sluicetest.Eventually(t, 60*time.Second, "some replayed deliveries", func() bool {
		_, replayed := replayIDs(sub)
		return len(replayed) >= 20
	})
	postN(t, url, "l", "e2e.live", nLive) // stored, maybe not delivered yet, at the kill
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	var err error
	select {
	case err = <-rpDone:
	case <-time.After(60 * time.Second):
		t.Fatalf("sluice replay did not end 60s after the kill:\n%s", rpOut.String())
	}
	out := rpOut.String()
	if err == nil || !strings.Contains(out, "incomplete") || !strings.Contains(out, "events were re-delivered") {
		t.Fatalf("replay through a kill -9: %v\n%s\nwant a non-zero exit saying it is incomplete and how many were re-delivered", err, out)
	}
	var said int
	if i := strings.Index(out, "at least "); i < 0 {
		t.Fatalf("no count in %q", out)
	} else if _, err := fmt.Sscanf(out[i:], "at least %d events", &said); err != nil {
		t.Fatalf("count in %q: %v", out, err)
	}
	_, replayed := replayIDs(sub)
	if said > len(replayed) || said >= n {
		t.Errorf("replay said %d re-delivered; subscriber got %d distinct replayed events of %d", said, len(replayed), n)
	}

	// Restart: the live events are all delivered (at least once), and a second replay of
	// the same window re-delivers every stored event.
	b2 := startBroker(t, args...)
	sluicetest.Eventually(t, 90*time.Second, "every live event delivered after the restart", func() bool {
		live, _ := replayIDs(sub)
		got := 0
		for i := range nLive {
			if live[fmt.Sprintf("l%d", i)] > 0 {
				got++
			}
		}
		return got == nLive
	})
	mark := len(sub.all())
	out2, err := sluiceCLI("replay", "--addr", b2.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--to", to, "--rate", "1000")
	if err != nil || !strings.Contains(out2, fmt.Sprintf("complete: %d events re-delivered", n)) {
		t.Fatalf("second replay: %v\n%s", err, out2)
	}
	again := map[string]bool{}
	for _, r := range sub.all()[mark:] {
		if r.Header.Get("Ce-Sluicereplay") != "" {
			again[r.Header.Get("Ce-Id")] = true
		}
	}
	for i := range n {
		if !again[fmt.Sprintf("s%d", i)] {
			t.Errorf("stored event s%d not re-delivered by the second replay", i)
		}
	}
	if len(again) != n {
		t.Errorf("second replay re-delivered %d distinct events, want %d (the live ones are after --to)", len(again), n)
	}
}

// TestRetentionKafka: a Broker annotated sluice.dev/retention: 2h on the Kafka channel
// gets a topic with retention.ms 7200000; a replay from before those two hours is
// refused with 400 naming the retention, one within them runs. On the memory channel the
// annotation makes the broker not ready, saying retention needs the kafka channel.
func TestRetentionKafka(t *testing.T) {
	ns := fmt.Sprintf("retain%d", time.Now().UnixNano())
	sub := newSubscriber(t, nil)
	token, _ := opsToken(t)
	yaml := strings.Replace(brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}),
		"metadata: {name: default, namespace: "+ns+"}", "metadata: {name: default, namespace: "+ns+`, annotations: {sluice.dev/retention: "2h"}}`, 1)
	b := startBroker(t, append([]string{"--config", writeConfig(t, yaml), "--ops-token-file", token}, kafkaArgs(t)...)...)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkatest.Brokers(t)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := kafka.TopicName(kafka.DefaultTopicPrefix, ns+"/default")
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ms string
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.Value != nil {
			ms = *c.Value
		}
	}
	if ms != "7200000" {
		t.Errorf("topic %s retention.ms %q, want 7200000", topic, ms)
	}

	trig := ns + "/t"
	old := time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339)
	out, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", old)
	if err == nil || !strings.Contains(out, "400") || !strings.Contains(out, "beyond the channel's retention of 2h0m0s") {
		t.Errorf("replay from 3h ago: %v, %q; want a 400 naming the retention of 2h", err, out)
	}
	from := time.Now().Add(-2 * time.Second).UTC().Format(time.RFC3339)
	postN(t, b.base+"/"+ns+"/default", "r", "e2e.retain", 5)
	sub.waitFor(t, 5, 60*time.Second)
	out, err = sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from)
	if err != nil || !strings.Contains(out, "complete: 5 events re-delivered") {
		t.Errorf("replay within the retention: %v\n%s", err, out)
	}

	mem := startServe(t, "--config", writeConfig(t, strings.Replace(brokerYAML("", [3]string{"t", "", sub.URL}),
		"metadata: {name: default, namespace: default}", `metadata: {name: default, namespace: default, annotations: {sluice.dev/retention: "2h"}}`, 1)))
	sluicetest.Eventually(t, 30*time.Second, "the memory broker's status to name the retention", func() bool {
		resp, err := http.Get(mem.base + "/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var rep struct {
			Objects []objectStatus
		}
		_ = json.NewDecoder(resp.Body).Decode(&rep)
		for _, o := range rep.Objects {
			if o.Kind == "Broker" && !o.Ready && strings.Contains(o.Reason, "sluice.dev/retention: not on the memory channel") {
				return true
			}
		}
		return false
	})
}

// TestReplayLongerThanWriteTimeout: a replay that runs longer than --write-timeout is
// not cut off (each progress line extends the deadline); a reload that removes the
// trigger ends its replay, and so does SIGTERM (reported incomplete; the server exits).
func TestReplayLongerThanWriteTimeout(t *testing.T) {
	ns := fmt.Sprintf("replaylong%d", time.Now().UnixNano())
	sub := newSubscriber(t, nil)
	token, _ := opsToken(t)
	cfg := writeConfig(t, brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}))
	b := startBroker(t, append([]string{"--config", cfg, "--ops-token-file", token, "--write-timeout", "2s"}, kafkaArgs(t)...)...)
	from := time.Now().Add(-2 * time.Second).UTC().Format(time.RFC3339)
	postN(t, b.base+"/"+ns+"/default", "w", "e2e.long", 20)
	sub.waitFor(t, 20, 60*time.Second)
	trig := ns + "/t"
	out, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--rate", "5")
	if err != nil || !strings.Contains(out, "complete: 20 events re-delivered") {
		t.Fatalf("replay of 4s with a write timeout of 2s: %v\n%s", err, out)
	}

	// A reload that removes the trigger ends its replay, reported incomplete.
	removed := exec.Command(sluiceBin, "replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--rate", "1")
	var removedOut syncbuf.Buffer
	removed.Stdout, removed.Stderr = &removedOut, &removedOut
	if err := removed.Start(); err != nil {
		t.Fatal(err)
	}
	removedDone := make(chan error, 1)
	go func() { removedDone <- removed.Wait() }()
	sluicetest.Eventually(t, 30*time.Second, "the replay's first progress line", func() bool { return strings.Contains(removedOut.String(), "matched") })
	replaceFile(t, cfg, brokerYAMLIn(ns, ""))
	select {
	case err := <-removedDone:
		if err == nil || !strings.Contains(removedOut.String(), "incomplete") || !strings.Contains(removedOut.String(), "the trigger stopped") {
			t.Fatalf("replay of a trigger a reload removed: %v\n%s", err, removedOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("replay of a trigger a reload removed did not end:\n%s", removedOut.String())
	}
	replaceFile(t, cfg, brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}))
	sluicetest.Eventually(t, 30*time.Second, "the trigger back", func() bool { return strings.Count(b.logs.String(), "trigger started") >= 2 })

	rp := exec.Command(sluiceBin, "replay", "--addr", b.base, "--ops-token-file", token, "--trigger", trig, "--from", from, "--rate", "1")
	var rpOut syncbuf.Buffer
	rp.Stdout, rp.Stderr = &rpOut, &rpOut
	if err := rp.Start(); err != nil {
		t.Fatal(err)
	}
	rpDone := make(chan error, 1)
	go func() { rpDone <- rp.Wait() }()
	sluicetest.Eventually(t, 30*time.Second, "the replay's first progress line", func() bool { return strings.Contains(rpOut.String(), "matched") })
	if err := b.stop(60 * time.Second); err != nil {
		t.Fatalf("sluice serve after SIGTERM during a replay: %v", err)
	}
	select {
	case err := <-rpDone:
		if err == nil || !strings.Contains(rpOut.String(), "incomplete") {
			t.Fatalf("replay through a shutdown: %v\n%s", err, rpOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("sluice replay did not end after the server stopped:\n%s", rpOut.String())
	}
}

// TestRetentionKinesis: a Broker annotated sluice.dev/retention: 30h on the Kinesis
// channel gets a stream whose retention period is 30 hours; a replay from before them is
// refused naming the retention.
func TestRetentionKinesis(t *testing.T) {
	ns := fmt.Sprintf("retain%d", time.Now().UnixNano())
	sub := newSubscriber(t, nil)
	token, _ := opsToken(t)
	yaml := strings.Replace(brokerYAMLIn(ns, "", [3]string{"t", "", sub.URL}),
		"metadata: {name: default, namespace: "+ns+"}", "metadata: {name: default, namespace: "+ns+`, annotations: {sluice.dev/retention: "30h"}}`, 1)
	b := startBroker(t, append([]string{"--config", writeConfig(t, yaml), "--ops-token-file", token}, kinesisArgs(t)...)...)
	out, err := kinesistest.Client(t).DescribeStreamSummary(context.Background(),
		&awskinesis.DescribeStreamSummaryInput{StreamName: aws.String(kinesis.StreamName(ns + "/default"))})
	if err != nil {
		t.Fatal(err)
	}
	if h := aws.ToInt32(out.StreamDescriptionSummary.RetentionPeriodHours); h != 30 {
		t.Errorf("stream retention %dh, want 30h", h)
	}
	old := time.Now().Add(-31 * time.Hour).UTC().Format(time.RFC3339)
	o, err := sluiceCLI("replay", "--addr", b.base, "--ops-token-file", token, "--trigger", ns+"/t", "--from", old)
	if err == nil || !strings.Contains(o, "400") || !strings.Contains(o, "beyond the channel's retention of 30h0m0s") {
		t.Errorf("replay from 31h ago: %v, %q; want a 400 naming the retention of 30h", err, o)
	}
}
