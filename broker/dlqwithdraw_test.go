package broker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestDLQPurgeStopsHandedOver: 20 dead letters, a slow subscriber, a redrive at rate
// 100 that hands all of them to the trigger (max-in-flight 2), then a purge. Only the
// attempts already at the subscriber when the purge came reach it; they fail again and
// are not stored anew; the rest are settled without an attempt.
func TestDLQPurgeStopsHandedOver(t *testing.T) {
	const n, inFlight = 20, 2
	for _, tc := range []struct {
		name  string
		purge func(ids []uint64) string // the purge's query
	}{
		{"all", func([]uint64) string { return "" }},
		{"by id", func(ids []uint64) string {
			q := make([]string, len(ids))
			for i, id := range ids {
				q[i] = "id=" + strconv.FormatUint(id, 10)
			}
			return "?" + strings.Join(q, "&")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var up atomic.Bool
			var arrived atomic.Int64 // requests of the redrive that reached the subscriber
			gate := make(chan struct{})
			sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if up.Load() {
					arrived.Add(1)
					<-gate // slow: held until the test lets it go
				}
				http.Error(w, "down", http.StatusInternalServerError)
			}))
			t.Cleanup(sub.Close)
			var once atomic.Bool
			open := func() {
				if once.CompareAndSwap(false, true) {
					close(gate)
				}
			}
			t.Cleanup(open) // runs before sub.Close: no handler stays blocked

			s := newTestServer(t, nil, WithOpsGuarded(true))
			h := s.Handler()
			doc := strings.Replace(dlqTriggerDoc("all", sub.URL), "namespace: ns}",
				"namespace: ns, annotations: {sluice.dev/max-in-flight: \""+strconv.Itoa(inFlight)+"\"}}", 1)
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+doc)); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if rec := post(h, "POST", "/ns/b", binary(strconv.Itoa(i)), "{}"); rec.Code != http.StatusAccepted {
					t.Fatal(rec.Code, rec.Body)
				}
			}
			b, _ := s.findBrokerTrigger("ns/all")
			page := func() ([]uint64, int) {
				p, err := b.dl.store.List(context.Background(), "ns/all", 0, 100)
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]uint64, len(p.Entries))
				for i, e := range p.Entries {
					ids[i] = e.ID
				}
				return ids, p.Total
			}
			sluicetest.Eventually(t, 30*time.Second, "stored", func() bool { _, total := page(); return total == n })
			ids, _ := page()

			up.Store(true)
			if rec := post(h, "POST", "/triggers/ns/all/dlq/redrive?rate=100", nil, ""); rec.Code != http.StatusAccepted {
				t.Fatal(rec.Code, rec.Body)
			}
			redriven := func() int { return int(testutil.ToFloat64(s.dlqm.redriven.WithLabelValues("ns/all"))) }
			withdrawn := func() int { return int(testutil.ToFloat64(s.dlqm.withdrawn.WithLabelValues("ns/all"))) }
			sluicetest.Eventually(t, 30*time.Second, "every dead letter handed over, the first at the subscriber", func() bool {
				return redriven() == n && !redriveRunning(b, "ns/all") && arrived.Load() >= 1
			})
			if rec := post(h, "POST", "/triggers/ns/all/dlq/purge"+tc.purge(ids), nil, ""); rec.Code != http.StatusOK {
				t.Fatalf("purge: %d %s", rec.Code, rec.Body)
			}
			open() // the attempts in flight fail again
			// each handed-over dead letter is either withdrawn or stored anew
			storedAnew := func() int { return int(testutil.ToFloat64(s.dlqm.stored.WithLabelValues("ns/all"))) - n }
			sluicetest.Eventually(t, 30*time.Second, "every handed-over dead letter settled", func() bool {
				return withdrawn()+storedAnew() == n
			})
			if got := arrived.Load(); got > inFlight {
				t.Errorf("%d redriven dead letters reached the subscriber; want at most the %d in flight when the purge came", got, inFlight)
			}
			if got := storedAnew(); got != 0 {
				t.Errorf("%d purged dead letters failed again and were stored anew; want 0", got)
			}
			if got := withdrawn(); got != n {
				t.Errorf("sluice_dlq_redrive_withdrawn_total = %d; want %d", got, n)
			}
			if _, total := page(); total != 0 {
				t.Errorf("the store holds %d dead letters after the purge; want 0: purged entries were stored anew", total)
			}
		})
	}
}
