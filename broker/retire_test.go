package broker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// TestReaddDuringRetire: a trigger removed by a reload and added back (a revert) while
// the removed one still drains takes its queue back: what was still queued and what is
// accepted afterwards is delivered, including after the retirement's deadline passed.
func TestReaddDuringRetire(t *testing.T) {
	tests := []struct {
		name    string
		removes int  // reloads that remove and add it back before the retirement ends
		ordered bool // the new dispatcher starts once the old one has settled what it held
	}{
		{"reverted once", 1, false},
		{"reverted twice", 2, false},
		{"ordered", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newSubscriber(t)
			defer sub.Close()
			sub.hung.Store(true)
			s, err := NewServer(WithChannelOpener(memoryOpener(memory.NewBudget(64<<20))), WithLogger(discardLogger()),
				WithMaxInFlight(2), WithShutdownTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer shutdownWithin(s, 30*time.Second)
			ctx := context.Background()
			doc := triggerDoc("h", "type.h", sub.URL)
			if tt.ordered {
				doc = strings.Replace(doc, "namespace: ns}", "namespace: ns, annotations: {kafka.eventing.knative.dev/delivery.order: ordered}}", 1)
			}
			with := loadConfig(t, plainBroker()+doc)
			if err := s.Apply(ctx, with); err != nil {
				t.Fatal(err)
			}
			for i := range 5 { // 2 held by the hung subscriber, 3 queued
				if code := ingestOne(s, fmt.Sprint(i), "type.h"); code != http.StatusAccepted {
					t.Fatalf("ingest: %d", code)
				}
			}
			for range tt.removes {
				if err := s.Apply(ctx, loadConfig(t, plainBroker())); err != nil { // removed: drains for 2s
					t.Fatal(err)
				}
				if err := s.Apply(ctx, with); err != nil { // reverted at once
					t.Fatal(err)
				}
			}
			time.Sleep(3 * time.Second) // past the retirement's deadline
			sub.hung.Store(false)
			for i := range 5 {
				if code := ingestOne(s, fmt.Sprint("new", i), "type.h"); code != http.StatusAccepted {
					t.Fatalf("ingest: %d", code)
				}
			}
			// The 3 queued before the revert and the 5 accepted after it; the 2 held by the
			// hung subscriber may have been released at the deadline (a memory channel).
			const want = 8
			deadline := time.Now().Add(30 * time.Second)
			for sub.got.Load() < want && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := sub.got.Load(); got < want {
				t.Errorf("re-added trigger delivered %d events, want at least %d (3 queued before the revert, 5 accepted after)", got, want)
			}
		})
	}
}

// slowRemoveChannel is a memory channel whose Remove, after saying so on entered, waits
// for gate to close: a backend deleting a queue for as long as the test wants.
type slowRemoveChannel struct {
	channel.Channel
	entered chan struct{}
	gate    chan struct{}
}

func (c *slowRemoveChannel) Remove(ctx context.Context, name string) error {
	c.entered <- struct{}{}
	<-c.gate
	return c.Channel.Remove(ctx, name)
}

// TestReaddDuringRemove: a trigger added back while its retirement is already deleting
// its queue waits for the deletion and opens a new queue: the old one's deletion does
// not close the new trigger's consumer, and what is accepted afterwards is delivered.
func TestReaddDuringRemove(t *testing.T) {
	sub := newSubscriber(t)
	defer sub.Close()
	ch := &slowRemoveChannel{Channel: memory.New(), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	s, err := NewServer(WithChannelOpener(func(context.Context, config.Broker) (channel.Channel, error) { return ch, nil }),
		WithLogger(discardLogger()), WithShutdownTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownWithin(s, 30*time.Second)
	release := sync.OnceFunc(func() { close(ch.gate) })
	defer release() // before the shutdown, even when the test fails early
	ctx := context.Background()
	with := loadConfig(t, plainBroker()+triggerDoc("h", "type.h", sub.URL))
	if err := s.Apply(ctx, with); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, loadConfig(t, plainBroker())); err != nil {
		t.Fatal(err)
	}
	select { // nothing to drain: the retirement deletes the queue at once
	case <-ch.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the retirement never removed the queue")
	}
	readded := make(chan error, 1)
	go func() { readded <- s.Apply(ctx, with) }()
	select {
	case err := <-readded:
		t.Fatalf("the trigger was added back (%v) while its old queue was being deleted", err)
	case <-time.After(200 * time.Millisecond): // it waits: the test only gives it a chance to be early
	}
	release()
	select {
	case err := <-readded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the trigger was never added back")
	}
	for i := range 5 {
		if code := ingestOne(s, fmt.Sprint(i), "type.h"); code != http.StatusAccepted {
			t.Fatalf("ingest: %d", code)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for sub.got.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := sub.got.Load(); got != 5 {
		t.Errorf("the re-added trigger delivered %d of 5 events accepted (202)", got)
	}
}

// shutdownWithin shuts s down, giving up on what is left after d.
func shutdownWithin(s *Server, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s.Shutdown(ctx)
}
