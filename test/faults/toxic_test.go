package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// toxicServer owns the in-process toxiproxy's proxies.
var toxicServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())

// newProxy starts a TCP proxy on listen ("127.0.0.1:0" for any port) to upstream; it is
// stopped when the test ends.
func newProxy(t *testing.T, name, listen, upstream string) *toxiproxy.Proxy {
	t.Helper()
	p := toxiproxy.NewProxy(toxicServer, name, listen, upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return p
}

// toxic is one fault toxiproxy injects, applied to both directions of a proxy.
type toxic struct {
	name  string
	typ   string
	attrs string // JSON object
}

// toxics are the faults of issue 14, sized for a 1 KiB event at a few hundred events/s.
var toxics = []toxic{
	{"latency 200ms ±100ms", "latency", `{"latency": 200, "jitter": 100}`},
	{"bandwidth 64 KB/s", "bandwidth", `{"rate": 64}`},
	{"reset_peer after 200ms", "reset_peer", `{"timeout": 200}`},
	{"timeout (black hole)", "timeout", `{"timeout": 0}`},
	{"slicer 64±32 B, 100µs", "slicer", `{"average_size": 64, "size_variation": 32, "delay": 100}`},
}

// add puts x on p in both directions.
func (x toxic) add(t *testing.T, p *toxiproxy.Proxy) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		js := fmt.Sprintf(`{"name": %q, "type": %q, "stream": %q, "toxicity": 1, "attributes": %s}`, x.typ+"-"+stream, x.typ, stream, x.attrs)
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			t.Fatalf("toxic %s: %v", x.name, err)
		}
	}
}

// remove takes x off p.
func (x toxic) remove(t *testing.T, p *toxiproxy.Proxy) {
	t.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		if err := p.Toxics.RemoveToxic(context.Background(), x.typ+"-"+stream); err != nil {
			t.Errorf("removing toxic %s: %v", x.name, err)
		}
	}
}

// phases of a fault scenario: load before the fault, the fault, load after it.
func phases() (before, during, after time.Duration) {
	if long {
		return 3 * time.Second, 20 * time.Second, 5 * time.Second
	}
	return time.Second, 3 * time.Second, 3 * time.Second
}

// faultRun runs load at rate against url, calls inject after the first phase and heal
// after the second, and checks every accepted event reaches s. Recovery is the time
// from heal until every event accepted before it was delivered.
func faultRun(t *testing.T, path, fault, url string, rate int, s *sink, inject, heal func()) result {
	t.Helper()
	before, during, after := phases()
	l := startFaultLoad(url, strings.NewReplacer(" ", "", "/", "").Replace(path+"-"+fault), rate)
	r := underFault(t, l, s, before, during, after, inject, heal, path+" / "+fault)
	r.Fault, r.Path = fault, path
	if r.IngressRecoveryS < 0 {
		t.Errorf("%s / %s: ingress accepted nothing in the %s after the fault was removed (last: %s)", path, fault, after, l.LastRefusal())
	}
	if l.NoRetryAfter() > 0 {
		t.Errorf("%s / %s: %d refusals without Retry-After (last: %s)", path, fault, l.NoRetryAfter(), l.LastRefusal())
	}
	if r.Lost > 0 {
		t.Errorf("%s / %s: %d accepted events lost", path, fault, r.Lost)
	}
	if r.Accepted == 0 {
		t.Errorf("%s / %s: nothing was accepted (last error: %s)", path, fault, l.LastRefusal())
	}
	record(t, r)
	return r
}

// underFault runs l, just started, through three phases, before, during the fault (inject, then heal
// after during) and after, stops it, and checks every accepted event reaches s (what
// names the scenario in errors). It returns the counts of the run: recovery is the time
// from heal's return until every event accepted before it was delivered, ingress recovery
// until the first 202 after it.
func underFault(t *testing.T, l loader, s *sink, before, during, after time.Duration, inject, heal func(), what string) result {
	t.Helper()
	time.Sleep(before)
	inject()
	time.Sleep(during)
	heal()
	healed := time.Now()
	backlog := l.acceptedIDs(healed)
	rec := make(chan time.Duration, 1)
	go func() {
		d, _ := s.waitAll(backlog, 120*time.Second)
		rec <- d
	}()
	time.Sleep(after)
	l.Stop()
	recovery := <-rec
	all := l.acceptedIDs(time.Time{})
	if _, ok := s.waitAll(all, 120*time.Second); !ok {
		t.Errorf("%s: not every accepted event arrived within 120s", what)
	}
	delivered, dups := s.count(all)
	return result{Sent: l.Sent(), Accepted: len(all), Refused: l.Refusals(),
		Delivered: delivered, Duplicates: dups, Lost: len(all) - delivered, RecoveryS: recovery.Seconds(),
		IngressRecoveryS: l.FirstAcceptedAfter(healed).Seconds()}
}

// shortToxics is the subset a path runs in the short form; the long form runs all.
func shortToxics(names ...string) []toxic {
	if long {
		return toxics
	}
	var out []toxic
	for _, x := range toxics {
		for _, n := range names {
			if x.typ == n {
				out = append(out, x)
			}
		}
	}
	return out
}

// TestToxicSubscriber puts each toxic between Sluice (embedded JetStream) and a
// subscriber under steady load.
func TestToxicSubscriber(t *testing.T) {
	s := newSink(t)
	px := newProxy(t, "subscriber", "127.0.0.1:0", strings.TrimPrefix(s.URL, "http://"))
	cfg := writeConfig(t, brokerYAML("faults", retrying, [2]string{"sub", "http://" + px.Listen + "/"}))
	b := startSluice(t, "--config", cfg, "--channel", "jetstream", "--data-dir", t.TempDir())
	for _, x := range toxics { // every toxic: this path is cheap
		t.Run(x.typ, func(t *testing.T) {
			faultRun(t, "sluice→subscriber", x.name, b.base+"/faults/default", 200, s,
				func() { x.add(t, px) }, func() { x.remove(t, px) })
		})
	}
}

// TestToxicNATS puts each toxic between Sluice and an external NATS server (natsd)
// under steady load.
func TestToxicNATS(t *testing.T) {
	n := startNATS(t, freePort(t), t.TempDir())
	px := newProxy(t, "nats", "127.0.0.1:0", n.addr)
	s := newSink(t)
	cfg := writeConfig(t, brokerYAML("faults", retrying, [2]string{"sub", s.URL}))
	b := startSluice(t, "--config", cfg, "--channel", "jetstream", "--nats-url", "nats://"+px.Listen)
	for _, x := range shortToxics("latency", "reset_peer", "timeout") {
		t.Run(x.typ, func(t *testing.T) {
			faultRun(t, "sluice→NATS", x.name, b.base+"/faults/default", 200, s,
				func() { x.add(t, px) }, func() { x.remove(t, px) })
		})
	}
}

// TestToxicKafka puts each toxic between Sluice and a single-node Kafka (which
// advertises the proxy's address, so every connection goes through it).
func TestToxicKafka(t *testing.T) {
	proxyPort := freePort(t)
	k := startKafka(t, proxyPort)
	px := newProxy(t, "kafka", fmt.Sprintf("127.0.0.1:%d", proxyPort), k.addr())
	s := newSink(t)
	ns := fmt.Sprintf("faults%d", time.Now().UnixNano())
	cfg := writeConfig(t, brokerYAML(ns, retrying, [2]string{"sub", s.URL}))
	b := startSluice(t, "--config", cfg, "--channel", "kafka", "--kafka-brokers", px.Listen)
	for _, x := range shortToxics("latency", "reset_peer", "timeout") {
		t.Run(x.typ, func(t *testing.T) {
			faultRun(t, "sluice→Kafka", x.name, b.base+"/"+ns+"/default", 200, s,
				func() { x.add(t, px) }, func() { x.remove(t, px) })
		})
	}
}
