package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
	"github.com/sluice-broker/sluice/event"
)

func TestDLQStore(t *testing.T) {
	e := startServer(t, t.TempDir())
	nc := connect(t, e)
	n := 0
	dlqtest.Run(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		n++
		c := newChannel(t, nc, fmt.Sprintf("ns/broker-%d", n))
		s, err := c.DLQStore(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestDLQStoreShared: replicas of one broker on one server share its dead letters
// (dlqtest.Shared); TestDLQStoreSurvivesRestartAndIsShared restarts the server too.
func TestDLQStoreShared(t *testing.T) {
	e := startServer(t, t.TempDir())
	dlqtest.Shared(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		s, err := newChannel(t, connect(t, e), "ns/b").DLQStore(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestDLQStoreSurvivesRestartAndIsShared stores through one channel, reads through
// another of the same broker (a replica), and again after the server restarts.
func TestDLQStoreSurvivesRestartAndIsShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	e, err := StartEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, nc, "ns/b")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.DLQStore(ctx, dlq.DefaultLimits())
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	replica := newChannel(t, connect(t, e), "ns/b")
	rs, _ := replica.DLQStore(ctx, dlq.DefaultLimits())
	if p, err := rs.List(ctx, "ns/t", 0, 10); err != nil || p.Total != 3 {
		t.Fatalf("a replica lists %d entries (%v); want the 3 stored through the other", p.Total, err)
	}
	_ = replica.Close()
	_ = c.Close()
	nc.Close()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	e2 := startServer(t, dir)
	c2 := newChannel(t, connect(t, e2), "ns/b")
	s2, _ := c2.DLQStore(ctx, dlq.DefaultLimits())
	p, err := s2.List(ctx, "ns/t", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Total != 3 || len(p.Entries) != 3 || p.Entries[2].Event.ID != "2" || p.Entries[0].Attempts != 3 {
		t.Fatalf("after restart: %+v; want the 3 entries", p)
	}
}

var _ channel.DLQStorer = (*Channel)(nil)

func FuzzDecodeDLQEntry(f *testing.F) {
	f.Add(encodeEntry(&dlq.Entry{Attempts: 2, Code: 500, Dest: "http://x", Reason: "boom",
		Event: &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: []byte("d")}}))
	f.Add([]byte{0})
	f.Add([]byte{2, '{', '}', 1, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		again, err := decodeEntry(encodeEntry(&e))
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if string(encodeEntry(&again)) != string(encodeEntry(&e)) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, again)
		}
	})
}

// TestDLQStoreDeletesAreNotEvictions: dead letters deleted while another is stored (a
// redrive's acks, here on a replica) are not counted as evictions when the store is far
// from its limits.
func TestDLQStoreDeletesAreNotEvictions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := startServer(t, t.TempDir())
	s, _ := newChannel(t, connect(t, e), "ns/b").DLQStore(ctx, dlq.DefaultLimits())
	rs, _ := newChannel(t, connect(t, e), "ns/b").DLQStore(ctx, dlq.DefaultLimits())
	const puts = 200
	done := make(chan struct{})
	deleted := make(chan int)
	go func() { // the replica deletes what it sees until the puts are done
		n := 0
		defer func() { deleted <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			p, err := rs.List(ctx, "ns/t", 0, 10)
			if err != nil {
				continue
			}
			for _, e := range p.Entries {
				if rs.Delete(ctx, "ns/t", e.ID) == nil {
					n++
				}
			}
		}
	}()
	evicted := 0
	for i := range puts {
		n, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 5))
		if err != nil {
			t.Fatal(err)
		}
		evicted += n
	}
	close(done)
	n := <-deleted
	if evicted != 0 {
		t.Errorf("%d evictions reported for %d puts far below the limits (%d deleted meanwhile); want 0", evicted, puts, n)
	}
}
