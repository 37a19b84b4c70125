package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// subscriber is a real HTTP subscriber on 127.0.0.1 that counts the events it accepts.
// Once hung, it answers nothing: each request waits until its client gives up.
type subscriber struct {
	*httptest.Server
	got  atomic.Int64
	hung atomic.Bool
}

func newSubscriber(t *testing.T) *subscriber {
	s := &subscriber{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: only then does the server notice the client going away.
		_, _ = io.Copy(io.Discard, r.Body)
		if s.hung.Load() {
			<-r.Context().Done()
			return
		}
		s.got.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	return s
}

// ingestOne posts one binary-mode event of type typ through the server's handler.
func ingestOne(s *Server, id, typ string) int {
	req := httptest.NewRequest(http.MethodPost, "/ns/b", strings.NewReader(`{"n":1}`))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": id, "Ce-Source": "/load", "Ce-Type": typ} {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec.Code
}

// TestRemoveTriggersUnderLoad removes triggers while events flow and their queues are
// full, then shuts down while removals are still delivering, and checks that:
// Shutdown's undelivered count is exact (every accepted event is either accepted by its
// subscriber or counted), an Apply after Shutdown is refused, the memory budget is back
// to zero, and no goroutine is left.
func TestRemoveTriggersUnderLoad(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	// a and c stay responsive; b and d hang from the second phase. b and c are removed.
	subs := map[string]*subscriber{}
	for _, name := range []string{"a", "b", "c", "d"} {
		subs[name] = newSubscriber(t)
	}
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()
	budget := memory.NewBudget(64 << 20)
	s, err := NewServer(WithChannelOpener(memoryOpener(budget)), WithLogger(discardLogger()),
		WithMaxInFlight(4), WithShutdownTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(names ...string) string {
		doc := plainBroker()
		for _, n := range names {
			doc += triggerDoc(n, "type."+n, subs[n].URL)
		}
		return doc
	}
	ctx := context.Background()
	if err := s.Apply(ctx, loadConfig(t, cfg("a", "b", "c", "d"))); err != nil {
		t.Fatal(err)
	}

	// accepted counts the 202s per type: each type matches exactly one trigger.
	var mu sync.Mutex
	accepted := map[string]int64{}
	load := func(types []string, stop <-chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for w, typ := range types {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					code := ingestOne(s, fmt.Sprintf("%d-%d", w, i), "type."+typ)
					switch code {
					case http.StatusAccepted:
						mu.Lock()
						accepted[typ]++
						mu.Unlock()
					case http.StatusTooManyRequests:
					default:
						t.Errorf("ingest %s: %d", typ, code)
						return
					}
					if i%64 == 0 {
						time.Sleep(time.Millisecond) // let the dispatchers run on a loaded machine
					}
				}
			})
		}
		return &wg
	}

	// Phase 1: events for every trigger, all subscribers answering.
	stop1 := make(chan struct{})
	wg1 := load([]string{"a", "b", "c", "d"}, stop1)
	time.Sleep(200 * time.Millisecond)
	close(stop1)
	wg1.Wait()

	// Phase 2: b and d hang, with a backlog; events keep flowing to a and d while b and
	// c are removed.
	subs["b"].hung.Store(true)
	subs["d"].hung.Store(true)
	stop2 := make(chan struct{})
	wg2 := load([]string{"a", "d"}, stop2)
	time.Sleep(50 * time.Millisecond)
	if err := s.Apply(ctx, loadConfig(t, cfg("a", "d"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop2)
	wg2.Wait()

	// The responsive triggers deliver everything (c while it retires); b's retirement and
	// d still hold their backlogs.
	deadline := time.Now().Add(10 * time.Second)
	for subs["a"].got.Load() < accepted["a"] || subs["c"].got.Load() < accepted["c"] {
		if time.Now().After(deadline) {
			t.Fatalf("a delivered %d of %d, c %d of %d", subs["a"].got.Load(), accepted["a"], subs["c"].got.Load(), accepted["c"])
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Shutdown with a short deadline ends b's retirement too, and counts what it left.
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	left := s.Shutdown(sctx)
	var want int64
	for _, n := range []string{"a", "b", "c", "d"} {
		want += accepted[n] - subs[n].got.Load()
	}
	t.Logf("accepted %v; Shutdown counted %d undelivered", accepted, left)
	if accepted["b"] == 0 || accepted["d"] == 0 {
		t.Fatalf("no backlog to lose: accepted %v", accepted)
	}
	if int64(left) != want {
		t.Errorf("Shutdown counted %d undelivered, want %d (accepted minus delivered)", left, want)
	}
	if err := s.Apply(ctx, loadConfig(t, cfg("a"))); !errors.Is(err, ErrShutdown) {
		t.Errorf("Apply after Shutdown: %v, want ErrShutdown", err)
	}
	if u := budget.Used(); u != 0 {
		t.Errorf("memory budget holds %d bytes after Shutdown, want 0", u)
	}
}

// TestRemovedTriggerFreesBudget removes a trigger whose subscriber hangs: once its
// removal gives up (the shutdown timeout), its queue's bytes are back in the budget and
// its goroutines are gone, while the server keeps running.
func TestRemovedTriggerFreesBudget(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sub := newSubscriber(t)
	defer sub.Close()
	sub.hung.Store(true)
	budget := memory.NewBudget(64 << 20)
	var logs lockedBuffer
	s, err := NewServer(WithChannelOpener(memoryOpener(budget)), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		WithMaxInFlight(2), WithShutdownTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Apply(ctx, loadConfig(t, plainBroker()+triggerDoc("h", "type.h", sub.URL))); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if code := ingestOne(s, fmt.Sprint(i), "type.h"); code != http.StatusAccepted {
			t.Fatalf("ingest: %d", code)
		}
	}
	if budget.Used() == 0 {
		t.Fatal("nothing queued")
	}
	if err := s.Apply(ctx, loadConfig(t, plainBroker())); err != nil {
		t.Fatal(err)
	}
	const removed = `msg="trigger removed before its queue drained" trigger=ns/h undelivered=100`
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), removed) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", removed, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if u := budget.Used(); u != 0 {
		t.Errorf("the removed trigger still holds %d bytes", u)
	}
	if left := s.Shutdown(ctx); left != 0 {
		t.Errorf("Shutdown counted %d, want 0: the removal ended before it and logged its own", left)
	}
}

// lockedBuffer is the log of a process or server that the test reads while it runs.
type lockedBuffer = syncbuf.Buffer
