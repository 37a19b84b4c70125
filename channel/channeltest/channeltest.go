// Package channeltest is the conformance suite of the channel contract: every backend
// (memory, jetstream, kafka, kinesis, and any added later) runs it from its own tests, so
// that "Len", "Release", "Remove" or "Close" mean the same whichever backend a broker
// uses. It plays the part testing/fstest plays for file systems.
//
// A backend's test calls Run with a Harness that opens a fresh channel (one per subtest,
// so subtests never see each other's events) and says which optional promises the
// backend makes:
//
//	func TestConformance(t *testing.T) {
//		channeltest.Run(t, channeltest.Harness{
//			Open:         func(t *testing.T) channel.Channel { return newChannel(t) },
//			Durable:      true,
//			Reopen:       func(t *testing.T, old channel.Channel) channel.Channel { ... },
//			MaxUnsettled: 1024,
//		})
//	}
//
// The subtests, and the Harness field that enables or skips each optional one:
//
//	PublishReceiveAck      every event once, data intact; nothing after all are acked
//	Routing                an event reaches only the subscriptions it names
//	FanOut                 one event routed to three subscriptions reaches each
//	Unrouted               envelopes routed nowhere (and empty batches) are accepted, not stored
//	PublishAllOrNothing    a batch that does not fit returns an error; a non-durable
//	                       channel then holds none of it (Limited; skipped when nil)
//	OrderPerKey            events sharing a partitionkey arrive in publish order
//	                       (skipped when Unordered)
//	ConcurrentReceivers    four goroutines on one consumer: each message to exactly one
//	Len                    stored and unsettled for this subscription only, down to 0 on ack
//	Release                reports Durable; a memory channel's Len drops to 0
//	RedeliverAfterRestart  released and held messages come back after Reopen, acked ones
//	                       do not (Durable and Reopen)
//	BoundedUnsettled       at most MaxUnsettled handed out unsettled (MaxUnsettled > 0)
//	ReceiveHonoursContext  Receive on an empty subscription ends with its context
//	Remove                 Remove closes that consumer (ErrClosed); others go on
//	Close                  consumers, Consume and Publish fail after Close; Close twice is fine
//	Durable                channel.IsDurable agrees with Harness.Durable
//	TooLarge               an event of TooLarge bytes of data fails with channel.ErrTooLarge
//	                       and is not stored; the next event is (TooLarge > 0)
//
// The whole suite takes a few seconds per backend: waits are bounded by Harness.Wait and
// the negative checks wait at most a second.
//
// The helpers Ctx, Event, Events, Consume, Publish, ReceiveN, ExpectNothing and AckAll
// are the one set every backend's own tests use too (with sluicetest.Eventually to wait
// for a condition).
package channeltest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// Harness describes the backend under test.
type Harness struct {
	// Open returns a new, empty channel; the harness closes it at the end of the test
	// (Close must tolerate being called twice). Required.
	Open func(t *testing.T) channel.Channel
	// Durable: the backend keeps unsettled events across a restart, Release reports
	// true, and the channel implements channel.Durable returning true.
	Durable bool
	// Reopen closes old and returns a channel on the same storage, as a restarted
	// process would open it. Durable backends set it; the restart tests skip without it.
	Reopen func(t *testing.T, old channel.Channel) channel.Channel
	// MaxUnsettled, when positive, is the backend's bound on messages handed out (or
	// waiting to be) and not settled per subscription: Receive hands out no more until
	// some are settled. Zero skips the bound test (the memory channel's bound is its
	// byte budget, tested in its own package).
	MaxUnsettled int
	// Unordered: the backend does not promise that events sharing a partitionkey
	// extension reach a subscription in publish order; the order test is skipped. Every
	// backend in this repository promises it, so the zero value asks for the test.
	Unordered bool
	// Limited, when set, returns a new, empty channel that can hold about limit bytes
	// of events (the memory channel's budget, a stream's byte limit), for the
	// all-or-nothing Publish test; nil skips that test.
	Limited func(t *testing.T, limit int64) channel.Channel
	// TooLarge, when positive, is a data size over the backend's largest event (a
	// message or record size limit): such an event must fail with channel.ErrTooLarge,
	// which ingress answers 413. Zero skips the test (the memory channel has no limit
	// of its own: the ingress's --max-event-bytes is the only one).
	TooLarge int
	// Wait bounds how long the suite waits for something that must happen (a message,
	// a Len value); default 20 s. Durable backends refresh some figures periodically.
	Wait time.Duration
}

func (h Harness) wait() time.Duration {
	if h.Wait > 0 {
		return h.Wait
	}
	return 20 * time.Second
}

// Run runs the conformance suite against the backend h describes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("channeltest: Harness.Open is required")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PublishReceiveAck", testPublishReceiveAck},
		{"Routing", testRouting},
		{"FanOut", testFanOut},
		{"Unrouted", testUnrouted},
		{"PublishAllOrNothing", testPublishAllOrNothing},
		{"OrderPerKey", testOrderPerKey},
		{"ConcurrentReceivers", testConcurrentReceivers},
		{"Len", testLen},
		{"Release", testRelease},
		{"RedeliverAfterRestart", testRedeliverAfterRestart},
		{"BoundedUnsettled", testBoundedUnsettled},
		{"ReceiveHonoursContext", testReceiveHonoursContext},
		{"Remove", testRemove},
		{"Close", testClose},
		{"Durable", testDurable},
		{"TooLarge", testTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

// open opens a channel for one subtest and closes it at the end.
func open(t *testing.T, h Harness) channel.Channel {
	t.Helper()
	c := h.Open(t)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Event returns a small valid event with the given id and extensions.
func Event(id string, ext ...event.Extension) *event.Event {
	return &event.Event{SpecVersion: "1.0", ID: id, Source: "/channeltest", Type: "io.sluice.test",
		Extensions: ext, Data: []byte(`{"id":"` + id + `"}`)}
}

// Events returns n events with ids prefix0 … prefix(n-1).
func Events(prefix string, n int) []*event.Event {
	evs := make([]*event.Event, n)
	for i := range evs {
		evs[i] = Event(prefix + strconv.Itoa(i))
	}
	return evs
}

// Consume opens the subscription called name, failing the test on error.
func Consume(t testing.TB, c channel.Channel, name string) channel.Consumer {
	t.Helper()
	k, err := c.Consume(Ctx(t, 20*time.Second), name)
	if err != nil {
		t.Fatalf("Consume(%q): %v", name, err)
	}
	return k
}

// Publish stores evs routed to subs in one Publish call, failing the test on error.
func Publish(t testing.TB, c channel.Channel, subs []string, evs ...*event.Event) {
	t.Helper()
	envs := make([]channel.Envelope, len(evs))
	for i, e := range evs {
		envs[i] = channel.Envelope{Event: e, Subscriptions: subs}
	}
	if err := c.Publish(Ctx(t, 20*time.Second), envs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// ReceiveN takes n messages from k within d, failing the test otherwise.
func ReceiveN(t testing.TB, k channel.Consumer, n int, d time.Duration) []channel.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ms := make([]channel.Message, 0, n)
	for len(ms) < n {
		m, err := k.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(ms), n, err)
		}
		ms = append(ms, m)
	}
	return ms
}

// ExpectNothing fails the test if k hands out a message within d.
func ExpectNothing(t testing.TB, k channel.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if m, err := k.Receive(ctx); err == nil {
		t.Fatalf("unexpected message %s", m.Event().ID)
	}
}

// AckAll acknowledges ms, failing the test on error.
func AckAll(t testing.TB, ms []channel.Message) {
	t.Helper()
	for _, m := range ms {
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack %s: %v", m.Event().ID, err)
		}
	}
}

func ids(ms []channel.Message) map[string]int {
	seen := make(map[string]int, len(ms))
	for _, m := range ms {
		seen[m.Event().ID]++
	}
	return seen
}

func testPublishReceiveAck(t *testing.T, h Harness) {
	c := open(t, h)
	k := Consume(t, c, "sub")
	Publish(t, c, []string{"sub"}, Events("e", 10)...)
	ms := ReceiveN(t, k, 10, h.wait())
	seen := ids(ms)
	for i := 0; i < 10; i++ {
		if id := "e" + strconv.Itoa(i); seen[id] != 1 {
			t.Errorf("%s received %d times, want once", id, seen[id])
		}
	}
	for _, m := range ms {
		if got := string(m.Event().Data); got != `{"id":"`+m.Event().ID+`"}` {
			t.Errorf("%s: data %q", m.Event().ID, got)
		}
	}
	AckAll(t, ms)
	ExpectNothing(t, k, 300*time.Millisecond)
}

func testRouting(t *testing.T, h Harness) {
	c := open(t, h)
	a, b := Consume(t, c, "a"), Consume(t, c, "b")
	Publish(t, c, []string{"a"}, Event("for-a"))
	Publish(t, c, []string{"b"}, Event("for-b"))
	ma := ReceiveN(t, a, 1, h.wait())
	mb := ReceiveN(t, b, 1, h.wait())
	if ma[0].Event().ID != "for-a" || mb[0].Event().ID != "for-b" {
		t.Fatalf("a got %s, b got %s", ma[0].Event().ID, mb[0].Event().ID)
	}
	AckAll(t, append(ma, mb...))
	ExpectNothing(t, a, 300*time.Millisecond)
	ExpectNothing(t, b, 100*time.Millisecond)
}

func testFanOut(t *testing.T, h Harness) {
	c := open(t, h)
	subs := []string{"a", "b", "c"}
	ks := make([]channel.Consumer, len(subs))
	for i, s := range subs {
		ks[i] = Consume(t, c, s)
	}
	Publish(t, c, subs, Event("shared"))
	for i, k := range ks {
		m := ReceiveN(t, k, 1, h.wait())[0]
		if m.Event().ID != "shared" {
			t.Errorf("%s got %s", subs[i], m.Event().ID)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

func testUnrouted(t *testing.T, h Harness) {
	c := open(t, h)
	k := Consume(t, c, "sub")
	if err := c.Publish(Ctx(t, h.wait()), []channel.Envelope{{Event: Event("nobody")}}); err != nil {
		t.Fatalf("Publish of an envelope routed nowhere: %v", err)
	}
	if err := c.Publish(Ctx(t, h.wait()), nil); err != nil {
		t.Fatalf("Publish of nothing: %v", err)
	}
	ExpectNothing(t, k, 300*time.Millisecond)
}

// testPublishAllOrNothing: a batch that does not fit is refused as a whole. Publish
// must return an error (never nil for a batch it could not store whole); a memory
// channel then holds none of it, so Len stays 0. A durable backend may have stored a
// part before it failed (the caller rejects the request and the client sends it again,
// so those are duplicates, not losses); only the error is asked of it.
func testPublishAllOrNothing(t *testing.T, h Harness) {
	if h.Limited == nil {
		t.Skip("the backend gives no way to open a channel with a byte limit (Harness.Limited)")
	}
	one := int64(Event("e0").Size())
	c := h.Limited(t, 4*one)
	t.Cleanup(func() { _ = c.Close() })
	k := Consume(t, c, "sub")
	envs := make([]channel.Envelope, 0, 64)
	for _, e := range Events("e", 64) {
		envs = append(envs, channel.Envelope{Event: e, Subscriptions: []string{"sub"}})
	}
	if err := c.Publish(Ctx(t, h.wait()), envs); err == nil {
		t.Fatalf("Publish of %d events into a channel limited to %d bytes returned nil", len(envs), 4*one)
	}
	if h.Durable {
		return
	}
	ExpectNothing(t, k, 300*time.Millisecond)
	if n := k.Len(); n != 0 {
		t.Fatalf("Len() = %d after a refused batch, want 0", n)
	}
	// The refusal is of that batch only: one that fits is stored.
	Publish(t, c, []string{"sub"}, Event("fits"))
	m := ReceiveN(t, k, 1, h.wait())[0]
	if m.Event().ID != "fits" {
		t.Fatalf("received %s, want fits", m.Event().ID)
	}
	AckAll(t, []channel.Message{m})
}

// testOrderPerKey: events sharing a partitionkey reach one consumer in publish order.
func testOrderPerKey(t *testing.T, h Harness) {
	if h.Unordered {
		t.Skip("the backend does not promise order per key (Harness.Unordered)")
	}
	c := open(t, h)
	k := Consume(t, c, "sub")
	const keys, per = 3, 20
	for i := 0; i < per; i++ {
		var evs []*event.Event
		for key := 0; key < keys; key++ {
			evs = append(evs, Event(fmt.Sprintf("k%d-%d", key, i), event.Extension{Name: "partitionkey", Value: "k" + strconv.Itoa(key)}))
		}
		Publish(t, c, []string{"sub"}, evs...)
	}
	next := make(map[string]int)
	for _, m := range ReceiveN(t, k, keys*per, h.wait()) {
		key, _ := m.Event().Get("partitionkey")
		want := fmt.Sprintf("%s-%d", key, next[key])
		if m.Event().ID != want {
			t.Fatalf("key %s: got %s, want %s", key, m.Event().ID, want)
		}
		next[key]++
		_ = m.Ack()
	}
}

// testConcurrentReceivers: several goroutines share one consumer; each message goes to
// exactly one of them.
func testConcurrentReceivers(t *testing.T, h Harness) {
	c := open(t, h)
	k := Consume(t, c, "sub")
	const n = 200
	Publish(t, c, []string{"sub"}, Events("e", n)...)
	ctx, cancel := context.WithTimeout(context.Background(), h.wait())
	defer cancel()
	var mu sync.Mutex
	seen := make(map[string]int)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := len(seen) >= n
				mu.Unlock()
				if done {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				m, err := k.Receive(rctx)
				rcancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				mu.Lock()
				seen[m.Event().ID]++
				mu.Unlock()
				_ = m.Ack()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("received %d distinct events of %d", len(seen), n)
	}
	for id, times := range seen {
		if times != 1 {
			t.Errorf("%s handed out %d times", id, times)
		}
	}
}

// testLen: Len counts what is stored for this subscription and not settled by it, not
// what other subscriptions hold.
func testLen(t *testing.T, h Harness) {
	c := open(t, h)
	k, other := Consume(t, c, "sub"), Consume(t, c, "other")
	Publish(t, c, []string{"other"}, Events("o", 7)...)
	Publish(t, c, []string{"sub"}, Events("s", 5)...)
	sluicetest.Eventually(t, h.wait(), "Len() == 5", func() bool { return k.Len() == 5 })
	ms := ReceiveN(t, k, 5, h.wait())
	AckAll(t, ms[:2])
	sluicetest.Eventually(t, h.wait(), "Len() == 3 with 2 of 5 acknowledged", func() bool { return k.Len() == 3 })
	AckAll(t, ms[2:])
	sluicetest.Eventually(t, h.wait(), "Len() == 0 with all acknowledged", func() bool { return k.Len() == 0 })
	sluicetest.Eventually(t, h.wait(), "other.Len() == 7", func() bool { return other.Len() == 7 })
}

// testRelease: a released message is settled as far as this process goes; a durable
// backend says it will deliver it again, a memory one that it is lost.
func testRelease(t *testing.T, h Harness) {
	c := open(t, h)
	k := Consume(t, c, "sub")
	Publish(t, c, []string{"sub"}, Event("r"))
	m := ReceiveN(t, k, 1, h.wait())[0]
	if got := m.Release(); got != h.Durable {
		t.Fatalf("Release() = %v, want %v (durable: %v)", got, h.Durable, h.Durable)
	}
	if !h.Durable {
		sluicetest.Eventually(t, h.wait(), "Len() == 0 after Release", func() bool { return k.Len() == 0 })
	}
}

// testRedeliverAfterRestart: what was acknowledged is not delivered again after a
// restart; what was released or never settled is.
func testRedeliverAfterRestart(t *testing.T, h Harness) {
	if !h.Durable || h.Reopen == nil {
		t.Skip("not a durable backend, or no Harness.Reopen")
	}
	c := h.Open(t)
	k := Consume(t, c, "sub")
	Publish(t, c, []string{"sub"}, Events("e", 6)...)
	ms := ReceiveN(t, k, 6, h.wait())
	acked := map[string]bool{}
	for _, m := range ms[:3] {
		acked[m.Event().ID] = true
	}
	AckAll(t, ms[:3])
	ms[3].Release()
	// ms[4] and ms[5] are held unsettled when the process "dies".
	c2 := h.Reopen(t, c)
	t.Cleanup(func() { _ = c2.Close() })
	k2 := Consume(t, c2, "sub")
	again := ReceiveN(t, k2, 3, h.wait())
	for _, m := range again {
		if acked[m.Event().ID] {
			t.Errorf("%s was acknowledged before the restart and delivered again", m.Event().ID)
		}
	}
	AckAll(t, again)
	ExpectNothing(t, k2, 500*time.Millisecond)
}

// testBoundedUnsettled: a consumer hands out at most MaxUnsettled messages not yet
// settled; settling one lets the next through.
func testBoundedUnsettled(t *testing.T, h Harness) {
	if h.MaxUnsettled <= 0 {
		t.Skip("the backend declares no bound on unsettled messages (Harness.MaxUnsettled)")
	}
	c := open(t, h)
	k := Consume(t, c, "sub")
	Publish(t, c, []string{"sub"}, Events("e", h.MaxUnsettled+5)...)
	held := ReceiveN(t, k, h.MaxUnsettled, h.wait())
	ExpectNothing(t, k, time.Second)
	AckAll(t, held[:1])
	ReceiveN(t, k, 1, h.wait())
}

func testReceiveHonoursContext(t *testing.T, h Harness) {
	c := open(t, h)
	k := Consume(t, c, "sub")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := k.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty subscription = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Receive returned %v after its context ended", d)
	}
}

// testRemove: Remove closes the subscription's consumer; other subscriptions go on.
func testRemove(t *testing.T, h Harness) {
	c := open(t, h)
	gone, kept := Consume(t, c, "gone"), Consume(t, c, "kept")
	Publish(t, c, []string{"gone", "kept"}, Event("before"))
	AckAll(t, ReceiveN(t, gone, 1, h.wait()))
	if err := c.Remove(Ctx(t, h.wait()), "gone"); err != nil {
		t.Fatalf("Remove of a settled subscription: %v", err)
	}
	if _, err := gone.Receive(Ctx(t, h.wait())); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Receive after Remove = %v, want ErrClosed", err)
	}
	Publish(t, c, []string{"kept"}, Event("after"))
	got := ReceiveN(t, kept, 2, h.wait())
	if got[0].Event().ID != "before" || got[1].Event().ID != "after" {
		t.Fatalf("kept got %s, %s", got[0].Event().ID, got[1].Event().ID)
	}
	AckAll(t, got)
}

// testClose: after Close, consumers and Publish report ErrClosed, and Close again is a
// no-op.
func testClose(t *testing.T, h Harness) {
	c := h.Open(t)
	k := Consume(t, c, "sub")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := k.Receive(Ctx(t, h.wait())); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Receive after Close = %v, want ErrClosed", err)
	}
	err := c.Publish(Ctx(t, h.wait()), []channel.Envelope{{Event: Event("late"), Subscriptions: []string{"sub"}}})
	if err == nil {
		t.Fatal("Publish after Close succeeded")
	}
	if _, err := c.Consume(Ctx(t, h.wait()), "sub"); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Consume after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func testDurable(t *testing.T, h Harness) {
	c := open(t, h)
	if got := channel.IsDurable(c); got != h.Durable {
		t.Fatalf("channel.IsDurable = %v, want %v", got, h.Durable)
	}
}

func testTooLarge(t *testing.T, h Harness) {
	if h.TooLarge <= 0 {
		t.Skip("no size limit of the backend's own (Harness.TooLarge)")
	}
	c := open(t, h)
	k := Consume(t, c, "sub")
	big := Event("big")
	big.Data = make([]byte, h.TooLarge)
	err := c.Publish(Ctx(t, h.wait()), []channel.Envelope{{Event: big, Subscriptions: []string{"sub"}}})
	if !errors.Is(err, channel.ErrTooLarge) || errors.Is(err, channel.ErrUnavailable) || errors.Is(err, channel.ErrFull) {
		t.Fatalf("publishing %d bytes of data: %v, want channel.ErrTooLarge only", h.TooLarge, err)
	}
	if r := channel.Reason(err); r == channel.Reason(channel.ErrTooLarge) {
		t.Errorf("the reason %q does not say which limit", r)
	}
	Publish(t, c, []string{"sub"}, Event("fits"))
	ms := ReceiveN(t, k, 1, h.wait())
	if id := ms[0].Event().ID; id != "fits" {
		t.Errorf("received %s, want fits (the refused event is not stored)", id)
	}
	AckAll(t, ms)
}
