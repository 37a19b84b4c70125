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
