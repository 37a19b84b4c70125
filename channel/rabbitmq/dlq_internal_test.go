package rabbitmq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
)

// TestDLQStoreEvictsByAge runs the store on a clock of its own: an entry's time is the
// one Put takes from that clock, kept in its message.
func TestDLQStoreEvictsByAge(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := New(ctx, "ns/broker", WithURL(url), WithPrefix(fmt.Sprintf("test-dlqage-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	defer func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = ch.QueueDelete(DLQQueue(c.Exchange()), false, false, false)
	}()
	lim := dlq.Limits{MaxEntries: 10, MaxBytes: 1 << 20, MaxAge: time.Hour}
	st, err := c.DLQStore(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*dlqStore)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	put := func(id string) int {
		n, err := s.Put(ctx, "ns/a", dlqtest.Entry(id, 1))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	put("old")
	clock = clock.Add(30 * time.Minute)
	put("mid")
	clock = clock.Add(45 * time.Minute) // "old" is 75 minutes old now
	if p, err := s.List(ctx, "ns/a", 0, 10); err != nil || p.Total != 1 || p.Entries[0].Event.ID != "mid" {
		t.Fatalf("listed %+v (%v); want mid alone", p.Entries, err)
	}
	clock = clock.Add(time.Hour)
	if n := put("new"); n != 2 {
		t.Fatalf("put evicted %d; want 2 (old, expired while listing, and mid)", n)
	}
	// A new store reading the stream holds "new" alone too.
	again, err := c.DLQStore(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	again.(*dlqStore).now = func() time.Time { return clock }
	if p, err := again.List(ctx, "ns/a", 0, 10); err != nil || p.Total != 1 || p.Entries[0].Event.ID != "new" {
		t.Fatalf("a second store lists %+v (%v); want new alone", p.Entries, err)
	}
}

// newDLQStoreFor returns a store of a new channel on the node, its stream deleted when
// the test ends.
func newDLQStoreFor(t *testing.T, lim dlq.Limits) (*Channel, *dlqStore) {
	t.Helper()
	url := rabbitmqtest.URL(t)
	c, err := New(context.Background(), "ns/broker", WithURL(url), WithPrefix(fmt.Sprintf("test-dlqlive-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(DLQQueue(c.Exchange()), false, false, false)
		}
	})
	st, err := c.DLQStore(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	return c, st.(*dlqStore)
}

// TestDLQStoreHoldsAppendsNothing: once the reader has read back a message of this
// process, Holds (a redrive asks it before each attempt) appends no marker, as List
// does (each would take room in the stream and push the oldest dead letters out): two
// dead letters stored around five such questions are neighbours in the stream.
func TestDLQStoreHoldsAppendsNothing(t *testing.T) {
	_, s := newDLQStoreFor(t, dlq.DefaultLimits())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := s.Put(ctx, "ns/a", dlqtest.Entry("a", 1)); err != nil {
		t.Fatal(err)
	}
	p, err := s.List(ctx, "ns/a", 0, 10)
	if err != nil || len(p.Entries) != 1 {
		t.Fatalf("listed %+v (%v); want a", p, err)
	}
	a := p.Entries[0].ID
	for range 5 {
		if held, err := s.Holds(ctx, "ns/a", a); err != nil || !held {
			t.Fatalf("Holds(a) = %v, %v; want true", held, err)
		}
	}
	if held, err := s.Holds(ctx, "ns/a", a+100); err != nil || held {
		t.Fatalf("Holds of an id never stored = %v, %v; want false", held, err)
	}
	if _, err := s.Put(ctx, "ns/a", dlqtest.Entry("b", 1)); err != nil {
		t.Fatal(err)
	}
	if p, err = s.List(ctx, "ns/a", a, 10); err != nil || len(p.Entries) != 1 {
		t.Fatalf("listed %+v (%v); want b", p, err)
	}
	if b := p.Entries[0].ID; b != a+2 { // the List between them appended one marker
		t.Fatalf("a is entry %d, b %d: the questions between them appended %d messages", a, b, b-a-2)
	}
}

// TestDLQStoreGapEvicts: a reader that finds the stream freed past where it stopped (it
// was away while more than the bound was appended) evicts the dead letters it read
// before: they were freed with it.
func TestDLQStoreGapEvicts(t *testing.T) {
	c, _ := newDLQStoreFor(t, dlq.DefaultLimits())
	s := &dlqStore{c: c, lim: dlq.DefaultLimits(), queue: "gap", now: time.Now,
		index: dlq.NewIndex[int64](dlq.DefaultLimits()), mine: map[string]chan dlqApplied{}}
	entry := func(off int64, id string) *amqp.Delivery {
		e := dlqtest.Entry(id, 1)
		return &amqp.Delivery{Headers: amqp.Table{"x-stream-offset": off}, Body: encodeDLQ(dlqKindEntry, "ns/a", dlq.Encode(&e))}
	}
	s.apply(entry(0, "old"))
	s.apply(entry(1, "next"))
	if n := s.index.Len(); n != 2 {
		t.Fatalf("held %d after two entries", n)
	}
	s.apply(entry(5000, "after-the-gap"))
	p := s.index.Page("ns/a", 0, 10)
	if len(p.Entries) != 1 || p.Entries[0].Event.ID != "after-the-gap" {
		t.Fatalf("after the gap the index holds %+v; want after-the-gap alone", p.Entries)
	}
}
