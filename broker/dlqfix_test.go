package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// redriveRunning reports whether trigger key of b has a redrive in progress.
func redriveRunning(b *Broker, key string) bool {
	b.dl.mu.Lock()
	defer b.dl.mu.Unlock()
	return b.dl.running[key] != nil
}

// TestDLQPurgeDuringRedrive: a purge, whole or by id, while a redrive runs: what it
// purged is not delivered afterwards (a whole purge stops the redrive).
func TestDLQPurgeDuringRedrive(t *testing.T) {
	for _, tc := range []struct {
		name  string
		purge string // query of the purge
		// want: the deliveries at most, given how many were delivered when the purge was sent
		max func(before int64) int64
	}{
		// at most the one being handed over when the purge came
		{"all", "", func(before int64) int64 { return before + 1 }},
		// 1, 2 and 3 are delivered, 4 and 5 are not
		{"by id", "?id=4&id=5", func(int64) int64 { return 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, up, ok := switchSubscriber(t)
			s := newTestServer(t, nil, WithOpsGuarded(true))
			h := s.Handler()
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"1", "2", "3", "4", "5"} {
				post(h, "POST", "/ns/b", binary(id), "{}")
			}
			b, _ := s.findBrokerTrigger("ns/all")
			total := func() int { p, _ := b.dl.store.List(context.Background(), "ns/all", 0, 10); return p.Total }
			sluicetest.Eventually(t, 30*time.Second, "stored", func() bool { return total() == 5 })
			up.Store(true)
			if rec := post(h, "POST", "/triggers/ns/all/dlq/redrive?rate=1", nil, ""); rec.Code != http.StatusAccepted {
				t.Fatal(rec.Code, rec.Body)
			}
			sluicetest.Eventually(t, 30*time.Second, "first redriven", func() bool { return ok.Load() >= 1 })
			before := ok.Load()
			if rec := post(h, "POST", "/triggers/ns/all/dlq/purge"+tc.purge, nil, ""); rec.Code != http.StatusOK {
				t.Fatalf("purge: %d %s", rec.Code, rec.Body)
			}
			sluicetest.Eventually(t, 30*time.Second, "the redrive over", func() bool { return !redriveRunning(b, "ns/all") })
			sluicetest.Eventually(t, 30*time.Second, "the store settled", func() bool { return total() == 0 })
			if got, limit := ok.Load(), tc.max(before); got > limit {
				t.Errorf("%d delivered (%d before the purge); want at most %d: purged dead letters were delivered", got, before, limit)
			}
		})
	}
}

// TestDLQRedriveStoreFailsKeeps: a redriven dead letter that fails again and cannot be
// stored anew stays in the store.
func TestDLQRedriveStoreFailsKeeps(t *testing.T) {
	var long atomic.Bool
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		if long.Load() { // a longer reason: the new entry is over --dlq-max-bytes
			_, _ = w.Write([]byte(strings.Repeat("x", 900)))
		}
	}))
	t.Cleanup(sub.Close)
	var logs lockedBuffer
	run := func(lim dlq.Limits) (*Server, *Broker) {
		s := newTestServer(t, nil, WithOpsGuarded(true), WithDLQ(lim), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
			t.Fatal(err)
		}
		post(s.Handler(), "POST", "/ns/b", binary("1"), "{}")
		b, _ := s.findBrokerTrigger("ns/all")
		return s, b
	}
	page := func(b *Broker) dlq.Page { p, _ := b.dl.store.List(context.Background(), "ns/all", 0, 10); return p }
	_, b0 := run(dlq.DefaultLimits())
	sluicetest.Eventually(t, 30*time.Second, "measured", func() bool { return page(b0).Total == 1 })
	size := page(b0).Bytes
	s, b := run(dlq.Limits{MaxEntries: 10, MaxBytes: size + 100, MaxAge: time.Hour})
	sluicetest.Eventually(t, 30*time.Second, "stored", func() bool { return page(b).Total == 1 })
	id := page(b).Entries[0].ID
	long.Store(true)
	if rec := post(s.Handler(), "POST", "/triggers/ns/all/dlq/redrive", nil, ""); rec.Code != http.StatusAccepted {
		t.Fatal(rec.Code, rec.Body)
	}
	sluicetest.Eventually(t, 30*time.Second, "the redriven event settled", func() bool {
		l := logs.String()
		return strings.Contains(l, "the dead-letter store failed") || strings.Contains(l, "stays in the dead-letter store")
	})
	sluicetest.Eventually(t, 30*time.Second, "the redrive over", func() bool { return !redriveRunning(b, "ns/all") })
	if p := page(b); p.Total != 1 || p.Entries[0].ID != id {
		t.Errorf("after a redrive whose new store failed the store holds %d entries %v; want dead letter %d kept", p.Total, p.Entries, id)
	}
}

// TestDLQMemoryTotal: the memory store keeps at most WithDLQMemoryLimit bytes, all
// triggers together, however many triggers dead-letter.
func TestDLQMemoryTotal(t *testing.T) {
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadRequest) }))
	t.Cleanup(sub.Close)
	const limit = 1 << 20
	reg := prometheus.NewRegistry()
	s := newTestServer(t, nil, WithOpsGuarded(true), WithDLQMemoryLimit(limit), WithRegisterer(reg))
	names := []string{"t1", "t2", "t3"}
	docs := plainBroker()
	for _, n := range names {
		docs += dlqTriggerDoc(n, sub.URL)
	}
	if err := s.Apply(context.Background(), loadConfig(t, docs)); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 100<<10)
	accepted := 0
	for i := range 20 {
		if rec := post(s.Handler(), "POST", "/ns/b", binary(fmt.Sprint(i)), body); rec.Code == http.StatusAccepted {
			accepted++
		}
	}
	if accepted == 0 {
		t.Fatal("no event accepted")
	}
	stored := func() int {
		n := 0
		for _, tr := range names {
			n += int(testutil.ToFloat64(s.dlqm.stored.WithLabelValues("ns/" + tr)))
		}
		return n
	}
	sluicetest.Eventually(t, 30*time.Second, "every failure stored", func() bool { return stored() == len(names)*accepted })
	var total int64
	for _, tr := range names {
		p, _ := s.dlqMemory.List(context.Background(), "ns/"+tr, 0, 1)
		total += p.Bytes
	}
	if total > limit || total == 0 {
		t.Errorf("the memory store holds %d bytes of %d events; want 1 to %d", total, len(names)*accepted, limit)
	}
}

// TestDLQReaddedTriggerKeeps: a trigger removed and added again while the old one still
// drains keeps the dead letters the new one stored when the old one's retirement ends.
func TestDLQReaddedTriggerKeeps(t *testing.T) {
	hold := make(chan struct{})
	var held atomic.Int64
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "hang" {
			held.Add(1)
			<-hold
		}
		w.WriteHeader(http.StatusBadRequest)
	}))
	t.Cleanup(sub.Close)
	t.Cleanup(func() { close(hold) }) // before sub.Close, which waits for the handler
	var logs lockedBuffer
	s := newTestServer(t, nil, WithOpsGuarded(true), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx := context.Background()
	with, without := plainBroker()+dlqTriggerDoc("all", sub.URL), plainBroker()
	if err := s.Apply(ctx, loadConfig(t, with)); err != nil {
		t.Fatal(err)
	}
	post(s.Handler(), "POST", "/ns/b", binary("hang"), "{}")
	sluicetest.Eventually(t, 30*time.Second, "a delivery held", func() bool { return held.Load() == 1 })
	if err := s.Apply(ctx, loadConfig(t, without)); err != nil { // the old trigger drains the held one
		t.Fatal(err)
	}
	if err := s.Apply(ctx, loadConfig(t, with)); err != nil {
		t.Fatal(err)
	}
	post(s.Handler(), "POST", "/ns/b", binary("new"), "{}")
	mem := s.dlqMemory.(*dlq.Memory)
	sluicetest.Eventually(t, 30*time.Second, "the new trigger's dead letter stored", func() bool { return mem.Len() == 1 })
	hold <- struct{}{} // the old trigger's delivery fails: stored too, then its retirement ends
	sluicetest.Eventually(t, 30*time.Second, "the old trigger retired", func() bool { return strings.Contains(logs.String(), "trigger removed") })
	p, _ := mem.List(ctx, "ns/all", 0, 10)
	var ids []string
	for _, e := range p.Entries {
		ids = append(ids, e.Event.ID)
	}
	if !strings.Contains(strings.Join(ids, ","), "new") {
		t.Errorf("after the old trigger retired the store holds %v; want the new trigger's dead letter kept", ids)
	}
}

// failingDeletes is a dead-letter store whose Delete fails once ok deletes were made:
// a backend that stops answering in the middle of a purge.
type failingDeletes struct {
	dlq.Store
	ok atomic.Int64
}

func (f *failingDeletes) Delete(ctx context.Context, trigger string, id uint64) error {
	if f.ok.Add(-1) < 0 {
		return fmt.Errorf("store: %w", context.DeadlineExceeded)
	}
	return f.Store.Delete(ctx, trigger, id)
}

// TestDLQPurgeByIDFailsMidway: a purge by id that the store fails part way answers 503
// with how many it purged.
func TestDLQPurgeByIDFailsMidway(t *testing.T) {
	sub, _, _ := switchSubscriber(t)
	s := newTestServer(t, nil, WithOpsGuarded(true))
	h := s.Handler()
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2", "3"} {
		post(h, "POST", "/ns/b", binary(id), "{}")
	}
	b, _ := s.findBrokerTrigger("ns/all")
	total := func() int { p, _ := b.dl.store.List(context.Background(), "ns/all", 0, 10); return p.Total }
	sluicetest.Eventually(t, 30*time.Second, "stored", func() bool { return total() == 3 })
	p, _ := b.dl.store.List(context.Background(), "ns/all", 0, 10)
	f := &failingDeletes{Store: b.dl.store}
	f.ok.Store(2)
	b.dl.store = f
	q := "?"
	for _, e := range p.Entries {
		q += "id=" + itoa(e.ID) + "&"
	}
	rec := post(h, "POST", "/triggers/ns/all/dlq/purge"+q, nil, "")
	if want := "2 of the 3 dead letters purged"; rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), want) {
		t.Errorf("purge: %d %q; want 503 saying %q", rec.Code, rec.Body, want)
	}
	if n := total(); n != 1 {
		t.Errorf("the store holds %d; want 1", n)
	}
}
