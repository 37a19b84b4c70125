package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
)

func TestMemoryEvictsByAge(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemory(Limits{MaxEntries: 10, MaxBytes: 1 << 20, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return clock }
	put := func(id string) int {
		n, err := m.Put(ctx, "ns/a", Entry{Event: &event.Event{ID: id}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	put("old")
	clock = clock.Add(30 * time.Minute)
	put("mid")
	clock = clock.Add(45 * time.Minute) // "old" is 75 minutes old now
	if p, _ := m.List(ctx, "ns/a", 0, 10); p.Total != 1 || p.Entries[0].Event.ID != "mid" {
		t.Fatalf("listed %+v; want mid alone", p.Entries)
	}
	clock = clock.Add(time.Hour)
	if n := put("new"); n != 2 {
		t.Fatalf("put evicted %d; want 2 (old, expired while listing, and mid)", n)
	}
}
