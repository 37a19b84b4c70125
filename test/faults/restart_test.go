package faults

import (
	"fmt"
	"testing"
	"time"
)

// restartRun runs steady load at rate against url, stops the engine, keeps it down for a
// while, starts it again (start returns once it serves) and checks: while it is down
// ingress refuses with 503 and Retry-After (a 202 then must still be delivered), ingress
// accepts again and the consumers deliver the backlog by themselves after it is back,
// and no accepted event is lost.
func restartRun(t *testing.T, engine, url string, rate int, s *sink, b *sluice, stop, start func()) result {
	t.Helper()
	down, after := 4*time.Second, 6*time.Second
	if long {
		down, after = 20*time.Second, 15*time.Second
	}
	l := startFaultLoad(url, fmt.Sprintf("restart-%s-%d", engine, time.Now().UnixNano()), rate)
	var before usage
	r := underFault(t, l, s, 2*time.Second, down, after, func() { before = b.usage(); stop() }, start, engine+" restart")
	r.Fault, r.Path = "restart (down "+down.String()+")", "sluice→"+engine
	afterU := b.usage()
	r.Note = fmt.Sprintf("RSS %d→%d MiB, goroutines %d→%d, fds %d→%d", before.RSS>>20, afterU.RSS>>20,
		before.Goroutines, afterU.Goroutines, before.FDs, afterU.FDs)
	switch {
	case l.NoRetryAfter() > 0:
		t.Errorf("%s restart: %d refusals without Retry-After (last: %s)", engine, l.NoRetryAfter(), l.LastRefusal())
	case l.Count(503) == 0:
		t.Errorf("%s restart: ingress never answered 503 while the engine was down (refused: %s)", engine, r.Refused)
	case r.IngressRecoveryS < 0:
		t.Errorf("%s restart: ingress accepted nothing in the %s after the engine was back (last: %s)", engine, after, l.LastRefusal())
	case r.Lost > 0:
		t.Errorf("%s restart: %d accepted events lost", engine, r.Lost)
	}
	record(t, r)
	return r
}

// TestRestartNATS stops and restarts an external NATS server (same port, same store)
// under load. Messages the server sent to a consumer just before the connection broke
// are lost in transit and redelivered only after the ack wait, so the backlog is
// delivered some time after --jetstream-ack-wait (5 s here): how long is recorded; the
// 30 s of margin only bound a hang, the machine's load sets the rest.
func TestRestartNATS(t *testing.T) {
	n := startNATS(t, freePort(t), t.TempDir())
	s := newSink(t)
	cfg := writeConfig(t, brokerYAML("faults", retrying, [2]string{"sub", s.URL}))
	b := startSluice(t, "--config", cfg, "--channel", "jetstream", "--nats-url", "nats://"+n.addr, "--jetstream-ack-wait", "5s")
	r := restartRun(t, "NATS", b.base+"/faults/default", 200, s, b, n.stop, n.start)
	if r.RecoveryS > 5+30 {
		t.Errorf("backlog delivered %.1fs after NATS was back, want within the 5s ack wait and 30s of margin", r.RecoveryS)
	}
}

// TestRestartKafka stops and restarts a single-node Kafka (same ports, same log dir)
// under load; ingress and the consumers must be back once Kafka serves (how long is
// recorded; the 60 s bound a hang).
func TestRestartKafka(t *testing.T) {
	k := startKafka(t, 0)
	s := newSink(t)
	ns := fmt.Sprintf("restart%d", time.Now().UnixNano())
	cfg := writeConfig(t, brokerYAML(ns, retrying, [2]string{"sub", s.URL}))
	b := startSluice(t, "--config", cfg, "--channel", "kafka", "--kafka-brokers", k.addr())
	r := restartRun(t, "Kafka", b.base+"/"+ns+"/default", 200, s, b, k.stop, k.start)
	if r.RecoveryS > 60 || r.IngressRecoveryS > 60 {
		t.Errorf("after Kafka was back: backlog delivered in %.1fs, ingress accepting in %.1fs, want both within 60s", r.RecoveryS, r.IngressRecoveryS)
	}
}
