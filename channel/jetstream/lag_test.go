package jetstream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// Len answers at once while the server is slow to: ingress's backlog verdict calls it on
// the request path, once per trigger, every millisecond, and before this a stale answer
// was refreshed by asking the server there and then, holding the request for a round
// trip (up to lagTimeout). Only the first answer is waited for. The server is reached
// through toxiproxy (in this process), which delays everything it sends by 30 s: a call
// that waited for the server takes that long, so the bounds below (a fifth and half of
// it) only tell waiting from not waiting, whatever the machine's load.
func TestLenDoesNotWaitForASlowServer(t *testing.T) {
	e := startServer(t, t.TempDir(), WithListen("127.0.0.1:0"))
	proxies := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(proxies, "nats", "127.0.0.1:0", strings.TrimPrefix(e.ClientURL(), "nats://"))
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	nc, err := nats.Connect("nats://"+p.Listen, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := newChannel(t, nc, "demo/default")
	cons := consume(t, c, "lagging").(*Consumer)
	publish(t, c, channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{"lagging"}},
		channel.Envelope{Event: testEvent(2, nil), Subscriptions: []string{"lagging"}})
	if got := cons.Len(); got != 2 { // the first answer, waited for
		t.Fatalf("Len() = %d with 2 published, want 2", got)
	}

	const delay = 30 * time.Second
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(
		fmt.Sprintf(`{"name": "slow", "type": "latency", "stream": "downstream", "attributes": {"latency": %d}}`, delay.Milliseconds()))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lagCacheTTL + 20*time.Millisecond) // the answer is stale: the next Len asks again
	for i := range 3 {
		start := time.Now()
		got := cons.Len()
		if took := time.Since(start); took > delay/5 {
			t.Fatalf("Len() call %d took %v with the server's answers delayed %v: it waited for the server", i+1, took, delay)
		}
		if got != 2 {
			t.Fatalf("Len() = %d while the server is slow, want the last answer, 2", got)
		}
	}
	cons.lagMu.Lock()
	asking := cons.asking
	cons.lagMu.Unlock()
	if !asking {
		t.Fatal("no ask of the server in flight after a stale Len()")
	}

	// Closing does not wait out the slow ask.
	start := time.Now()
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > delay/2 {
		t.Fatalf("Close took %v with an ask in flight, want it cancelled", took)
	}
	if err := p.Toxics.RemoveToxic(context.Background(), "slow"); err != nil {
		t.Fatal(err)
	}
}

// After the first answer, a stale Len starts one ask in the background, and its answer
// is what later calls move from.
func TestLenAsksInTheBackground(t *testing.T) {
	c, cons := lagging(t)
	cons.lagMu.Lock()
	first := cons.lagAt
	cons.lagMu.Unlock()
	publish(t, c, channel.Envelope{Event: testEvent(1, nil), Subscriptions: []string{"lagging"}})
	time.Sleep(lagCacheTTL + 20*time.Millisecond)
	if got := cons.Len(); got != 1 { // the moved answer, while the ask runs
		t.Fatalf("Len() = %d with 1 published, want 1", got)
	}
	sluicetest.Eventually(t, 5*time.Second, "the background ask answered", func() bool {
		cons.lagMu.Lock()
		defer cons.lagMu.Unlock()
		return !cons.asking && cons.lagAt.After(first)
	})
	cons.lagMu.Lock()
	lag, movedFrom := cons.lag, cons.lagPublished
	cons.lagMu.Unlock()
	if lag != 1 || movedFrom != 1 {
		t.Fatalf("after the background ask: server's lag %d, moved from %d published; want 1 and 1", lag, movedFrom)
	}
	if got := cons.Len(); got != 1 {
		t.Fatalf("Len() = %d after the ask, want 1", got)
	}
}

// lagging starts a server, a channel on it and its consumer "lagging", whose first Len
// (the one waited for) must be 0.
func lagging(t *testing.T) (*Channel, *Consumer) {
	t.Helper()
	e := startServer(t, t.TempDir())
	c := newChannel(t, connect(t, e), "demo/default")
	cons := consume(t, c, "lagging").(*Consumer)
	if got := cons.Len(); got != 0 {
		t.Fatalf("Len() = %d before any publish, want 0", got)
	}
	return c, cons
}
