package broker

import (
	"context"
	"encoding/json"
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

// dlqTriggerDoc is trigger ns/name with no retry and no dead-letter sink.
func dlqTriggerDoc(name, url string) string {
	return "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: " + name + ", namespace: ns}\n" +
		"spec: {broker: b, filter: {attributes: {type: t}}, subscriber: {uri: \"" + url + "\"}, delivery: {retry: 0}}\n"
}

// switchSubscriber answers 500 "down" until up is set, then 202; it counts the 202s.
func switchSubscriber(t *testing.T) (*httptest.Server, *atomic.Bool, *atomic.Int64) {
	var up atomic.Bool
	var ok atomic.Int64
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		ok.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(sub.Close)
	return sub, &up, &ok
}

// TestDLQListRedrivePurge: events that fail without a sink are kept, listed with why,
// redriven once the subscriber is back (leaving the store as they are delivered), and
// purged.
func TestDLQListRedrivePurge(t *testing.T) {
	sub, up, ok := switchSubscriber(t)
	reg := prometheus.NewRegistry()
	s := newTestServer(t, nil, WithOpsGuarded(true), WithRegisterer(reg))
	h := s.Handler()
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"1", "2", "3"} {
		if rec := post(h, "POST", "/ns/b", binary(id), "{}"); rec.Code != http.StatusAccepted {
			t.Fatalf("event %s: %d %s", id, rec.Code, rec.Body)
		}
	}
	list := func() DLQPage {
		t.Helper()
		rec := post(h, "GET", "/triggers/ns/all/dlq", nil, "")
		if rec.Code != http.StatusOK {
			t.Fatalf("GET dlq: %d %s", rec.Code, rec.Body)
		}
		var p DLQPage
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sluicetest.Eventually(t, 30*time.Second, "3 dead letters", func() bool { return list().Total == 3 })
	p := list()
	e := p.Entries[0]
	if e.Attempts != 1 || e.Code != 500 || e.Reason != "down" || !strings.Contains(string(e.Event), `"type":"t"`) || p.Durable {
		t.Fatalf("entry %+v event %s; want an event after 1 attempt, 500 down, in memory", e.Entry, e.Event)
	}
	if strings.Contains(string(e.Event), "knativeerror") {
		t.Errorf("listed event carries the error extensions: %s", e.Event)
	}

	up.Store(true)
	rec := post(h, "POST", "/triggers/ns/all/dlq/redrive?rate=100&id="+itoa(p.Entries[0].ID), nil, "")
	if rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), `"total":1`) {
		t.Fatalf("redrive one: %d %s", rec.Code, rec.Body)
	}
	sluicetest.Eventually(t, 30*time.Second, "one redriven", func() bool { return list().Total == 2 && ok.Load() == 1 })
	if rec := post(h, "POST", "/triggers/ns/all/dlq/redrive", nil, ""); rec.Code != http.StatusAccepted {
		t.Fatalf("redrive all: %d %s", rec.Code, rec.Body)
	}
	sluicetest.Eventually(t, 30*time.Second, "all redriven", func() bool { return list().Total == 0 && ok.Load() == 3 })
	if v := testutil.ToFloat64(s.dlqm.redriven.WithLabelValues("ns/all")); v != 3 {
		t.Errorf("sluice_dlq_redriven_total = %v; want 3", v)
	}

	up.Store(false)
	if rec := post(h, "POST", "/ns/b", binary("4"), "{}"); rec.Code != http.StatusAccepted {
		t.Fatal(rec.Code)
	}
	sluicetest.Eventually(t, 30*time.Second, "one more", func() bool { return list().Total == 1 })
	rec = post(h, "POST", "/triggers/ns/all/dlq/purge", nil, "")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"purged":1`) || list().Total != 0 {
		t.Fatalf("purge: %d %s", rec.Code, rec.Body)
	}
}

// TestDLQRedriveFailsAgain: a redriven event that fails again is stored anew before
// the old entry goes: the store never loses it.
func TestDLQRedriveFailsAgain(t *testing.T) {
	sub, _, _ := switchSubscriber(t)
	s := newTestServer(t, nil, WithOpsGuarded(true))
	h := s.Handler()
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
		t.Fatal(err)
	}
	post(h, "POST", "/ns/b", binary("1"), "{}")
	b, _ := s.findBrokerTrigger("ns/all")
	ids := func() []uint64 {
		p, _ := b.dl.store.List(context.Background(), "ns/all", 0, 10)
		var out []uint64
		for _, e := range p.Entries {
			out = append(out, e.ID)
		}
		return out
	}
	sluicetest.Eventually(t, 30*time.Second, "stored", func() bool { return len(ids()) == 1 })
	first := ids()[0]
	if rec := post(h, "POST", "/triggers/ns/all/dlq/redrive", nil, ""); rec.Code != http.StatusAccepted {
		t.Fatalf("redrive: %d %s", rec.Code, rec.Body)
	}
	sluicetest.Eventually(t, 30*time.Second, "stored anew", func() bool { got := ids(); return len(got) == 1 && got[0] != first })
}

// TestDLQRequests: what the endpoints refuse, and why.
func TestDLQRequests(t *testing.T) {
	sub, _, _ := switchSubscriber(t)
	for _, tc := range []struct {
		name    string
		guarded bool
		method  string
		path    string
		code    int
		says    string
	}{
		{"redrive without token file", false, "POST", "/triggers/ns/all/dlq/redrive", 403, "--ops-token-file"},
		{"purge without token file", false, "POST", "/triggers/ns/all/dlq/purge", 403, "--ops-token-file"},
		{"list without token file", false, "GET", "/triggers/ns/all/dlq", 200, `"trigger":"ns/all"`},
		{"unknown trigger", true, "GET", "/triggers/ns/none/dlq", 404, "ns/none"},
		{"rate too high", true, "POST", "/triggers/ns/all/dlq/redrive?rate=1001", 400, "rate"},
		{"rate zero", true, "POST", "/triggers/ns/all/dlq/redrive?rate=0", 400, "rate"},
		{"bad id", true, "POST", "/triggers/ns/all/dlq/purge?id=x", 400, `id "x"`},
		{"too many ids", true, "POST", "/triggers/ns/all/dlq/purge?" + strings.Repeat("id=1&", maxRedriveIDs+1), 400, "at most 1000"},
		{"limit too high", true, "GET", "/triggers/ns/all/dlq?limit=1001", 400, "limit"},
		{"bad after", true, "GET", "/triggers/ns/all/dlq?after=-1", 400, "after"},
		{"GET redrive", true, "GET", "/triggers/ns/all/dlq/redrive", 405, "POST"},
		{"POST list", true, "POST", "/triggers/ns/all/dlq", 405, "GET"},
		{"unknown action", true, "POST", "/triggers/ns/all/dlq/nope", 404, "/dlq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, nil, WithOpsGuarded(tc.guarded))
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
				t.Fatal(err)
			}
			rec := post(s.Handler(), tc.method, tc.path, nil, "")
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.says) {
				t.Fatalf("%s %s: %d %s; want %d saying %q", tc.method, tc.path, rec.Code, rec.Body, tc.code, tc.says)
			}
		})
	}
}

// TestDLQOffDrops: with the store off (MaxEntries 0) the endpoint says so.
func TestDLQOff(t *testing.T) {
	sub, _, _ := switchSubscriber(t)
	s := newTestServer(t, nil, WithDLQ(dlq.Limits{}))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL))); err != nil {
		t.Fatal(err)
	}
	if rec := post(s.Handler(), "GET", "/triggers/ns/all/dlq", nil, ""); rec.Code != 404 || !strings.Contains(rec.Body.String(), "--dlq-max-entries 0") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if _, err := NewServer(WithChannelOpener(memoryOpener(nil)), WithDLQ(dlq.Limits{MaxEntries: 5})); err == nil ||
		!strings.Contains(err.Error(), "--dlq-max-bytes") {
		t.Fatalf("NewServer with a bad limit: %v; want it named", err)
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestDLQRemovedTriggerForgotten: on a memory store, a removed trigger's dead letters,
// which nobody could list any more, are dropped.
func TestDLQRemovedTriggerForgotten(t *testing.T) {
	sub, _, _ := switchSubscriber(t)
	s := newTestServer(t, nil)
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("all", sub.URL)+dlqTriggerDoc("other", sub.URL))); err != nil {
		t.Fatal(err)
	}
	post(s.Handler(), "POST", "/ns/b", binary("1"), "{}")
	mem := s.dlqMemory.(*dlq.Memory)
	sluicetest.Eventually(t, 30*time.Second, "stored twice", func() bool { return mem.Len() == 2 })
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+dlqTriggerDoc("other", sub.URL))); err != nil {
		t.Fatal(err)
	}
	sluicetest.Eventually(t, 30*time.Second, "the removed trigger's dropped", func() bool { return mem.Len() == 1 })
}
