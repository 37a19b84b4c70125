package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// heldSubscriber is a subscriber whose requests wait until released (all at once, or one
// per token), counting how many are inside at once and the most ever inside together.
type heldSubscriber struct {
	url       string
	inside    atomic.Int64
	peak      atomic.Int64
	delivered atomic.Int64
	gate      chan struct{}
	tokens    chan struct{} // each lets one request through
}

func newHeldSubscriber(t *testing.T) *heldSubscriber {
	t.Helper()
	h := &heldSubscriber{gate: make(chan struct{}), tokens: make(chan struct{}, 1024)}
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := h.inside.Add(1)
		for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
		}
		defer h.inside.Add(-1)
		select {
		case <-h.gate:
		case <-h.tokens:
		case <-r.Context().Done(): // the attempt timed out: it is retried
			return
		}
		h.delivered.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	h.url = sub.URL
	t.Cleanup(sub.Close)
	t.Cleanup(h.release) // runs first: a request waiting on the gate ends before Close
	return h
}

func (h *heldSubscriber) release() {
	select {
	case <-h.gate:
	default:
		close(h.gate)
	}
}

// countingChannel is a memory channel that counts the messages its consumers hand out:
// how many events the dispatchers have taken.
type countingChannel struct {
	channel.Channel
	received *atomic.Int64
}

func (c countingChannel) Consume(ctx context.Context, name string) (channel.Consumer, error) {
	cons, err := c.Channel.Consume(ctx, name)
	return countingConsumer{cons, c.received}, err
}

type countingConsumer struct {
	channel.Consumer
	received *atomic.Int64
}

func (c countingConsumer) Receive(ctx context.Context) (channel.Message, error) {
	m, err := c.Consumer.Receive(ctx)
	if err == nil {
		c.received.Add(1)
	}
	return m, err
}

// newCountingServer is newTestServer on countingChannels, counting into received.
func newCountingServer(t *testing.T, received *atomic.Int64, opts ...Option) *Server {
	t.Helper()
	open := func(context.Context, config.Broker) (channel.Channel, error) {
		return countingChannel{memory.New(), received}, nil
	}
	return newTestServer(t, nil, append(opts, WithChannelOpener(open))...)
}

// releaseOneByOne lets the subscriber's held requests through one at a time until
// delivered counts upto, each time waiting for the next state: one more delivered, and as
// many inside as the cap allows (capped) of what is left of total. A dispatcher sending
// more than capped at once leaves more inside, which peak records. Under the adaptive
// limit (exact false) fewer may be inside: a latency climb may cut it below the cap, as
// the held requests' latency grows with every step, so only "at most capped" is awaited.
func (h *heldSubscriber) releaseOneByOne(t *testing.T, capped int, upto, total int64, exact bool) {
	t.Helper()
	for d := h.delivered.Load(); d < upto; d++ {
		h.tokens <- struct{}{}
		inside := min(int64(capped), total-d-1)
		sluicetest.Eventually(t, 30*time.Second, fmt.Sprintf("%d delivered, %d inside", d+1, inside), func() bool {
			n := h.inside.Load()
			return h.delivered.Load() == d+1 && (n == inside || !exact && n <= inside)
		})
	}
}

// cappedTriggerDoc is triggerDoc with the given annotations (YAML flow entries). Its
// attempts time out after 10 minutes, not the default 10 s: the tests hold requests at
// the subscriber for as long as a busy machine makes them, and an attempt timed out and
// retried would change the counts they check.
func cappedTriggerDoc(name, url, ann string) string {
	doc := strings.Replace(triggerDoc(name, "t", url), "\"}}\n", "\"}, delivery: {timeout: PT10M}}\n", 1)
	if ann == "" {
		return doc
	}
	return strings.Replace(doc, "namespace: ns}", "namespace: ns, annotations: {"+ann+"}}", 1)
}

// sendN posts n events of type t to broker ns/b, each answered 202.
func sendN(t *testing.T, h http.Handler, prefix string, n int) {
	t.Helper()
	for i := range n {
		if rec := post(h, "POST", "/ns/b", binary(prefix+strconv.Itoa(i)), "{}"); rec.Code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, rec.Code, rec.Body)
		}
	}
}

// TestMaxInFlightAnnotation: with sluice.dev/max-in-flight: "2" and a subscriber that
// holds every request, exactly 2 requests reach it at once (the adaptive limit starts at
// its ceiling, the cap); released, every event is delivered. The cap never lifts a
// trigger above the server's --max-in-flight.
func TestMaxInFlightAnnotation(t *testing.T) {
	const events = 10
	sub := newHeldSubscriber(t)
	var received atomic.Int64
	s := newCountingServer(t, &received)
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+cappedTriggerDoc("all", sub.url, `sluice.dev/max-in-flight: "2"`))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	sendN(t, h, "e", events)
	// The dispatcher has taken every event (room for a third attempt, were the cap not
	// there) and 2 are at the subscriber.
	sluicetest.Eventually(t, 30*time.Second, "every event taken, 2 requests at the subscriber", func() bool {
		return received.Load() == events && sub.inside.Load() == 2
	})
	if got, lim := sub.peak.Load(), s.findTrigger("ns/all").dispatcher.Limit(); got != 2 || lim != 2 {
		t.Fatalf("%d requests at once, in-flight limit %d; want 2 and 2", got, lim)
	}
	sub.releaseOneByOne(t, 2, events, events, false)
	if got := sub.peak.Load(); got != 2 {
		t.Fatalf("%d requests at once, want at most 2", got)
	}

	// Above the server's ceiling: the server's.
	s2 := newTestServer(t, nil, WithMaxInFlight(3))
	if err := s2.Apply(context.Background(), loadConfig(t, plainBroker()+cappedTriggerDoc("all", sub.url, `sluice.dev/max-in-flight: "50"`))); err != nil {
		t.Fatal(err)
	}
	if lim := s2.findTrigger("ns/all").dispatcher.Limit(); lim != 3 {
		t.Fatalf("max-in-flight 50 under --max-in-flight 3: limit %d, want 3", lim)
	}
}

// TestCapsReload: changing the annotations of a running trigger changes its caps, and
// every event is delivered: in flight 1, then 3 on a reload while events are held, then
// the caps removed; a rate cap so low that events wait for tokens, then lifted.
func TestCapsReload(t *testing.T) {
	const events = 12
	sub := newHeldSubscriber(t)
	var received atomic.Int64
	s := newCountingServer(t, &received, withFixedInFlight(true))
	apply := func(ann string) {
		t.Helper()
		if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+cappedTriggerDoc("all", sub.url, ann))); err != nil {
			t.Fatal(err)
		}
	}
	h := s.Handler()
	apply(`sluice.dev/max-in-flight: "1"`)
	sendN(t, h, "a", events)
	// Every event taken by the dispatcher (room for a second attempt, were the cap not
	// there), one at the subscriber.
	sluicetest.Eventually(t, 30*time.Second, "every event taken, 1 request at the subscriber", func() bool {
		return received.Load() == events && sub.inside.Load() == 1
	})
	sub.releaseOneByOne(t, 1, 4, events, true)
	if got := sub.peak.Load(); got != 1 {
		t.Fatalf("%d requests at once under max-in-flight 1", got)
	}
	apply(`sluice.dev/max-in-flight: "3"`)
	sluicetest.Eventually(t, 30*time.Second, "3 requests at the subscriber", func() bool { return sub.inside.Load() == 3 })
	sub.releaseOneByOne(t, 3, events, events, true)
	if got := sub.peak.Load(); got != 3 {
		t.Fatalf("%d requests at once under max-in-flight 3", got)
	}
	sub.release()

	// A rate of one token per 1000 s: one event goes (the burst), the rest wait; lifted,
	// they all go. Once the dispatcher has taken every event, only the burst is delivered.
	apply(`sluice.dev/max-delivery-rate: "0.001"`)
	sendN(t, h, "b", events)
	sluicetest.Eventually(t, 30*time.Second, "the burst delivered, every event taken", func() bool {
		return sub.delivered.Load() == events+1 && received.Load() == 2*events
	})
	if got := sub.delivered.Load(); got != events+1 || sub.inside.Load() != 0 {
		t.Fatalf("%d delivered, %d at the subscriber under 0.001/s; want %d and 0", got, sub.inside.Load(), events+1)
	}
	apply(`sluice.dev/max-delivery-rate: "500"`)
	sluicetest.Eventually(t, 30*time.Second, "every event delivered", func() bool { return sub.delivered.Load() == 2*events })
	apply("")
	sendN(t, h, "c", events)
	sluicetest.Eventually(t, 30*time.Second, "every event delivered", func() bool { return sub.delivered.Load() == 3*events })
	shutdown(t, s)
}

// TestMaxDeliveryRateAnnotation: under sluice.dev/max-delivery-rate: "50", 20 events all
// reach a real subscriber.
func TestMaxDeliveryRateAnnotation(t *testing.T) {
	const events = 20
	sub, n := countingSubscriber(t)
	s := newTestServer(t, nil)
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+cappedTriggerDoc("all", sub.URL, `sluice.dev/max-delivery-rate: "50"`))); err != nil {
		t.Fatal(err)
	}
	sendN(t, s.Handler(), "e", events)
	sluicetest.Eventually(t, 60*time.Second, "every event delivered", func() bool { return n.Load() == events })
	shutdown(t, s)
}
