package broker

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/memory"
)

// TestReaddDuringRetire: a trigger removed by a reload and added back (a revert) while
// the removed one still drains takes its queue back: what was still queued and what is
// accepted afterwards is delivered, including after the retirement's deadline passed.
func TestReaddDuringRetire(t *testing.T) {
	tests := []struct {
		name    string
		removes int // reloads that remove and add it back before the retirement ends
	}{
		{"reverted once", 1},
		{"reverted twice", 2},
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
			defer s.Shutdown(context.Background())
			ctx := context.Background()
			with := loadConfig(t, plainBroker()+triggerDoc("h", "type.h", sub.URL))
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
