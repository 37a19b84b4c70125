// Package dlqtest checks that a dlq.Store keeps the contract every store shares: order,
// pagination, eviction within the limits, delete and purge.
package dlqtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/event"
)

// NewStore returns an empty store bounded by lim.
type NewStore func(t *testing.T, lim dlq.Limits) dlq.Store

// Entry returns an entry whose event has id and data of n bytes.
func Entry(id string, n int) dlq.Entry {
	return dlq.Entry{Attempts: 3, Code: 503, Dest: "http://127.0.0.1:1/x", Reason: "busy",
		Event: &event.Event{SpecVersion: "1.0", ID: id, Source: "/s", Type: "t", Data: make([]byte, n)}}
}

// Run runs the shared checks against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	ctx := context.Background()
	lim := dlq.DefaultLimits()
	ids := func(p dlq.Page) string {
		s := ""
		for _, e := range p.Entries {
			s += e.Event.ID + ","
		}
		return s
	}
	t.Run("order and pages", func(t *testing.T) {
		s := newStore(t, lim)
		for i := range 5 {
			if _, err := s.Put(ctx, "ns/a", Entry(fmt.Sprint(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Put(ctx, "ns/b", Entry("b0", 10)); err != nil {
			t.Fatal(err)
		}
		p, err := s.List(ctx, "ns/a", 0, 2)
		if err != nil {
			t.Fatal(err)
		}
		if ids(p) != "0,1," || p.Total != 5 || p.Next == 0 || p.Last <= p.Next {
			t.Fatalf("first page %q total %d next %d last %d; want 0,1 of 5 with a next below the last", ids(p), p.Total, p.Next, p.Last)
		}
		e := p.Entries[0]
		if e.Attempts != 3 || e.Code != 503 || e.Reason != "busy" || e.Dest == "" || e.Time.IsZero() || e.ID == 0 {
			t.Fatalf("entry %+v lost its attempts, code, reason, dest, time or id", e)
		}
		var all string
		for after := uint64(0); ; {
			p, err := s.List(ctx, "ns/a", after, 2)
			if err != nil {
				t.Fatal(err)
			}
			all += ids(p)
			if p.Next == 0 {
				break
			}
			after = p.Next
		}
		if all != "0,1,2,3,4," {
			t.Fatalf("paged through %q; want 0..4", all)
		}
		if p, _ := s.List(ctx, "ns/b", 0, 10); ids(p) != "b0," {
			t.Fatalf("ns/b holds %q; want b0 alone", ids(p))
		}
		if p, _ := s.List(ctx, "ns/none", 0, 10); p.Total != 0 || len(p.Entries) != 0 {
			t.Fatalf("unknown trigger holds %+v", p)
		}
	})
	t.Run("delete and purge", func(t *testing.T) {
		s := newStore(t, lim)
		for i := range 3 {
			if _, err := s.Put(ctx, "ns/a", Entry(fmt.Sprint(i), 10)); err != nil {
				t.Fatal(err)
			}
		}
		p, _ := s.List(ctx, "ns/a", 0, 10)
		if err := s.Delete(ctx, "ns/a", p.Entries[1].ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "ns/a", p.Entries[1].ID); !errors.Is(err, dlq.ErrNotFound) {
			t.Fatalf("second delete: %v; want ErrNotFound", err)
		}
		if p, _ := s.List(ctx, "ns/a", 0, 10); ids(p) != "0,2," || p.Total != 2 {
			t.Fatalf("after delete %q (%d); want 0,2", ids(p), p.Total)
		}
		n, err := s.Purge(ctx, "ns/a")
		if err != nil || n != 2 {
			t.Fatalf("purge: %d, %v; want 2", n, err)
		}
		if p, _ := s.List(ctx, "ns/a", 0, 10); p.Total != 0 {
			t.Fatalf("after purge %d entries", p.Total)
		}
	})
	t.Run("refuses an entry above the bytes bound", func(t *testing.T) {
		// Stored, it would evict every other entry, and itself too.
		s := newStore(t, dlq.Limits{MaxEntries: 10, MaxBytes: 2000, MaxAge: lim.MaxAge})
		if _, err := s.Put(ctx, "ns/a", Entry("small", 10)); err != nil {
			t.Fatal(err)
		}
		_, err := s.Put(ctx, "ns/a", Entry("big", 5000))
		if err == nil || !strings.Contains(err.Error(), "--dlq-max-bytes 2000") {
			t.Fatalf("Put of a 5000-byte entry: %v; want an error naming --dlq-max-bytes", err)
		}
		if p, _ := s.List(ctx, "ns/a", 0, 10); ids(p) != "small," {
			t.Fatalf("after the refusal the store holds %q; want small alone", ids(p))
		}
	})
	for _, tc := range []struct {
		name      string
		lim       dlq.Limits
		put, size int
		want      string
		evicted   int
	}{
		{"entries", dlq.Limits{MaxEntries: 3, MaxBytes: 1 << 20, MaxAge: lim.MaxAge}, 5, 10, "2,3,4,", 2},
		{"bytes", dlq.Limits{MaxEntries: 100, MaxBytes: 3000, MaxAge: lim.MaxAge}, 5, 1000, "3,4,", 3},
	} {
		t.Run("evicts oldest by "+tc.name, func(t *testing.T) {
			s := newStore(t, tc.lim)
			evicted := 0
			for i := range tc.put {
				n, err := s.Put(ctx, "ns/a", Entry(fmt.Sprint(i), tc.size))
				if err != nil {
					t.Fatal(err)
				}
				evicted += n
			}
			p, _ := s.List(ctx, "ns/a", 0, 100)
			if ids(p) != tc.want || evicted != tc.evicted {
				t.Fatalf("kept %q, evicted %d; want %q and %d", ids(p), evicted, tc.want, tc.evicted)
			}
		})
	}
}

// Shared checks that the stores open returns for one broker share its entries, as
// replicas and restarted processes do: what one stores, deletes or evicts, another
// lists; a store opened afterwards holds the same entries, their fields kept; a purge
// empties it for all. Every store it opens has the same limits, as replicas must.
func Shared(t *testing.T, open func(t *testing.T, lim dlq.Limits) dlq.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lim := dlq.Limits{MaxEntries: 4, MaxBytes: 1 << 20, MaxAge: time.Hour}
	list := func(s dlq.Store) (string, dlq.Page) {
		t.Helper()
		p, err := s.List(ctx, "ns/t", 0, dlq.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		ids := ""
		for _, e := range p.Entries {
			ids += e.Event.ID + ","
		}
		return ids, p
	}
	a := open(t, lim)
	for i := range 3 {
		if _, err := a.Put(ctx, "ns/t", Entry(fmt.Sprint(i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	b := open(t, lim)
	ids, p := list(b)
	if ids != "0,1,2," || p.Total != 3 {
		t.Fatalf("a replica lists %q of %d; want the 3 stored through the other", ids, p.Total)
	}
	if err := b.Delete(ctx, "ns/t", p.Entries[0].ID); err != nil {
		t.Fatal(err)
	}
	// The replica stores 3 more: with 2 held and a bound of 4, one is evicted.
	evicted := 0
	for i := 3; i < 6; i++ {
		n, err := b.Put(ctx, "ns/t", Entry(fmt.Sprint(i), 5))
		if err != nil {
			t.Fatal(err)
		}
		evicted += n
	}
	if evicted != 1 {
		t.Fatalf("the replica evicted %d; want 1", evicted)
	}
	const want = "2,3,4,5,"
	if got, _ := list(a); got != want {
		t.Fatalf("the first store lists %q after the replica's delete and stores; want %q", got, want)
	}
	if err := a.Delete(ctx, "ns/t", p.Entries[0].ID); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("deleting what the replica deleted: %v; want ErrNotFound", err)
	}
	again := open(t, lim)
	got, p := list(again)
	if got != want || p.Total != 4 {
		t.Fatalf("a store opened again lists %q of %d; want %q", got, p.Total, want)
	}
	if e := p.Entries[0]; e.Attempts != 3 || e.Code != 503 || e.Reason != "busy" || e.Dest == "" || e.Time.IsZero() {
		t.Fatalf("a store opened again holds %+v: its attempts, code, reason, dest or time lost", e)
	}
	if n, err := again.Purge(ctx, "ns/t"); err != nil || n != 4 {
		t.Fatalf("purge: %d, %v; want 4", n, err)
	}
	for _, s := range []dlq.Store{a, b, open(t, lim)} {
		if got, p := list(s); got != "" || p.Total != 0 {
			t.Fatalf("after a purge a store lists %q of %d", got, p.Total)
		}
	}
}
