package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

func ev(id string, data int) *event.Event {
	return &event.Event{SpecVersion: "1.0", ID: id, Source: "/t", Type: "t", Data: make([]byte, data)}
}

func TestPublishReceiveFIFO(t *testing.T) {
	c := New()
	ctx := context.Background()
	cons, err := c.Consume(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ { // more than the ring's first size, so it grows
		if err := c.Publish(ctx, []channel.Envelope{{Event: ev(fmt.Sprint(i), 10), Subscriptions: []string{"a"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := cons.Len(); n != 200 {
		t.Fatalf("Len = %d, want 200", n)
	}
	for i := 0; i < 200; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Event().ID; got != fmt.Sprint(i) {
			t.Fatalf("message %d has id %s", i, got)
		}
		m.Ack()
	}
	if u := c.Budget().Used(); u != 0 {
		t.Fatalf("budget used after all acks = %d", u)
	}
}

func TestBudget(t *testing.T) {
	one := int64(ev("x", 1000).Size())
	tests := []struct {
		name    string
		limit   int64
		subs    []string
		publish int
		wantOK  int
	}{
		{"fits exactly", 3 * one, []string{"a"}, 3, 3},
		{"full rejects", 3 * one, []string{"a"}, 5, 3},
		{"fan-out counted once", 3 * one, []string{"a", "b", "c"}, 4, 3},
		{"unrouted costs nothing", one, nil, 10, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(WithBudget(NewBudget(tt.limit)))
			for _, name := range tt.subs {
				if _, err := c.Consume(context.Background(), name); err != nil {
					t.Fatal(err)
				}
			}
			ok := 0
			for i := 0; i < tt.publish; i++ {
				err := c.Publish(context.Background(), []channel.Envelope{{Event: ev("x", 1000), Subscriptions: tt.subs}})
				switch {
				case err == nil:
					ok++
				case !errors.Is(err, channel.ErrFull):
					t.Fatalf("publish: %v, want ErrFull", err)
				}
			}
			if ok != tt.wantOK {
				t.Fatalf("accepted %d, want %d", ok, tt.wantOK)
			}
			if u := c.Budget().Used(); u > tt.limit {
				t.Fatalf("used %d over limit %d", u, tt.limit)
			}
		})
	}
}

// TestPublishLargerThanBudget: a batch larger than the budget's limit can never be
// stored: Publish refuses it with ErrTooLarge (413), not ErrFull (429, retried forever),
// and stores nothing; an event within the limit is still refused ErrFull while full.
func TestPublishLargerThanBudget(t *testing.T) {
	one := int64(ev("x", 1000).Size())
	tests := []struct {
		name  string
		limit int64
		batch int
		want  error
	}{
		{"one event over the limit", one - 1, 1, channel.ErrTooLarge},
		{"a batch over the limit", 2*one + 1, 3, channel.ErrTooLarge},
		{"a batch over what is left", 3 * one, 3, channel.ErrFull}, // one is queued first
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(WithBudget(NewBudget(tt.limit)))
			ctx := context.Background()
			if _, err := c.Consume(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if errors.Is(tt.want, channel.ErrFull) {
				if err := c.Publish(ctx, []channel.Envelope{{Event: ev("first", 1000), Subscriptions: []string{"a"}}}); err != nil {
					t.Fatal(err)
				}
			}
			used := c.Budget().Used()
			var envs []channel.Envelope
			for i := range tt.batch {
				envs = append(envs, channel.Envelope{Event: ev(fmt.Sprint(i), 1000), Subscriptions: []string{"a"}})
			}
			err := c.Publish(ctx, envs)
			if !errors.Is(err, tt.want) {
				t.Fatalf("publish: %v, want %v", err, tt.want)
			}
			if u := c.Budget().Used(); u != used {
				t.Fatalf("budget used %d after the refusal, was %d", u, used)
			}
		})
	}
}

func TestFanOutReleasesOnLastAck(t *testing.T) {
	c := New()
	ctx := context.Background()
	a, _ := c.Consume(ctx, "a")
	b, _ := c.Consume(ctx, "b")
	if err := c.Publish(ctx, []channel.Envelope{{Event: ev("1", 100), Subscriptions: []string{"a", "b"}}}); err != nil {
		t.Fatal(err)
	}
	ma, _ := a.Receive(ctx)
	mb, _ := b.Receive(ctx)
	if ma.Event() != mb.Event() {
		t.Fatal("fan-out copied the event")
	}
	ma.Ack()
	if c.Budget().Used() == 0 {
		t.Fatal("released before the last subscription settled")
	}
	if mb.Release() {
		t.Fatal("memory Release claims redelivery")
	}
	if u := c.Budget().Used(); u != 0 {
		t.Fatalf("used = %d after both settled", u)
	}
}

func TestBatchAllOrNothing(t *testing.T) {
	one := int64(ev("x", 100).Size())
	c := New(WithBudget(NewBudget(2 * one)))
	if _, err := c.Consume(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(context.Background(), []channel.Envelope{{Event: ev("0", 100), Subscriptions: []string{"a"}}}); err != nil {
		t.Fatal(err)
	}
	envs := []channel.Envelope{ // fits the budget, not what is left of it
		{Event: ev("1", 100), Subscriptions: []string{"a"}},
		{Event: ev("2", 100), Subscriptions: []string{"a"}},
	}
	if err := c.Publish(context.Background(), envs); !errors.Is(err, channel.ErrFull) {
		t.Fatalf("publish = %v, want ErrFull", err)
	}
	if n := c.Len("a"); n != 1 {
		t.Fatalf("a partial batch was queued: %d queued, want the first one only", n)
	}
}

func TestConcurrentReceivers(t *testing.T) {
	c := New()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, _ := c.Consume(ctx, "a")
	const n = 10000
	var mu sync.Mutex
	seen := make(map[string]bool, n)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := cons.Receive(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				if seen[m.Event().ID] {
					t.Errorf("duplicate %s", m.Event().ID)
				}
				seen[m.Event().ID] = true
				done := len(seen) == n
				mu.Unlock()
				m.Ack()
				if done {
					cancel()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		if err := c.Publish(ctx, []channel.Envelope{{Event: ev(fmt.Sprint(i), 1), Subscriptions: []string{"a"}}}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("received %d of %d", len(seen), n)
	}
}

func TestRemoveAndClose(t *testing.T) {
	c := New()
	ctx := context.Background()
	cons, _ := c.Consume(ctx, "a")
	c.Publish(ctx, []channel.Envelope{{Event: ev("1", 10), Subscriptions: []string{"a"}}})
	err := c.Remove(ctx, "a")
	if err == nil {
		t.Fatal("Remove with a queued event reported nothing")
	}
	if _, err := cons.Receive(ctx); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Receive after Remove = %v", err)
	}
	if u := c.Budget().Used(); u != 0 {
		t.Fatalf("used = %d after Remove", u)
	}
	c.Close()
	if err := c.Publish(ctx, []channel.Envelope{{Event: ev("2", 10), Subscriptions: []string{"b"}}}); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("Publish after Close = %v", err)
	}
}

func BenchmarkPublishReceive(b *testing.B) {
	c := New()
	ctx := context.Background()
	cons, _ := c.Consume(ctx, "a")
	e := ev("x", 2048)
	envs := []channel.Envelope{{Event: e, Subscriptions: []string{"a"}}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := c.Publish(ctx, envs); err != nil {
			b.Fatal(err)
		}
		m, _ := cons.Receive(ctx)
		m.Ack()
	}
}

// TestPublishAfterRemoveStoresNothing: an event routed by the index of before a trigger's
// removal arrives after it. The removed queue must not come back (nothing would consume
// it and its bytes would never return to the budget); the live route still gets it.
func TestPublishAfterRemoveStoresNothing(t *testing.T) {
	c := New()
	ctx := context.Background()
	if _, err := c.Consume(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	kept, _ := c.Consume(ctx, "kept")
	if err := c.Remove(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	size := int64(ev("1", 10).Size())
	for _, tt := range []struct {
		subs []string
		want int64 // bytes charged
	}{
		{[]string{"gone"}, 0},
		{[]string{"gone", "kept"}, size},
	} {
		if err := c.Publish(ctx, []channel.Envelope{{Event: ev("1", 10), Subscriptions: tt.subs}}); err != nil {
			t.Fatalf("Publish to %v: %v", tt.subs, err)
		}
		if got := c.Budget().Used(); got != tt.want {
			t.Errorf("Publish to %v: %d bytes charged, want %d", tt.subs, got, tt.want)
		}
		if n := c.Len("gone"); n != 0 {
			t.Errorf("Publish to %v recreated the removed queue (Len %d)", tt.subs, n)
		}
	}
	m, err := kept.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Ack()
	if u := c.Budget().Used(); u != 0 {
		t.Fatalf("used = %d after the live route settled", u)
	}
}
