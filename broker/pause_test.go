package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// pausedTriggerDoc is triggerDoc with sluice.dev/paused: "true".
func pausedTriggerDoc(name, url string) string {
	return strings.Replace(triggerDoc(name, "t", url), "namespace: ns}", `namespace: ns, annotations: {sluice.dev/paused: "true"}}`, 1)
}

// TestPauseAnnotationAndAPI: a trigger annotated sluice.dev/paused: "true" delivers
// nothing while its events are stored; it is paused while the annotation or the API
// says so (GET names which), a resume through the API clears the API's pause only, and
// a reload keeps the API's pause whatever it does to the annotation.
func TestPauseAnnotationAndAPI(t *testing.T) {
	sub, n := countingSubscriber(t)
	s := newTestServer(t, nil, WithOpsGuarded(true))
	h := s.Handler()
	apply := func(yaml string) {
		t.Helper()
		if err := s.Apply(context.Background(), loadConfig(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	depth := func() int { return s.findTrigger("ns/all").consumer.Len() }
	send := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if rec := post(h, "POST", "/ns/b", binary(id), "{}"); rec.Code != http.StatusAccepted {
				t.Fatalf("event %s: %d %s", id, rec.Code, rec.Body)
			}
		}
	}
	state := func(method, path string, want int) TriggerState {
		t.Helper()
		rec := post(h, method, path, nil, "")
		if rec.Code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, rec.Code, rec.Body, want)
		}
		var st TriggerState
		if want == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	expect := func(method, path string, paused bool, by ...string) {
		t.Helper()
		st := state(method, path, 200)
		if st.Trigger != "ns/all" || st.Paused != paused || strings.Join(st.PausedBy, ",") != strings.Join(by, ",") {
			t.Fatalf("%s %s: %+v; want paused %v by %q", method, path, st, paused, by)
		}
	}

	apply(plainBroker() + pausedTriggerDoc("all", sub.URL))
	send("1", "2", "3")
	if depth() != 3 || n.Load() != 0 {
		t.Fatalf("paused by the annotation: %d queued, %d delivered; want 3 and 0", depth(), n.Load())
	}
	expect("GET", "/triggers/ns/all", true, "annotation")
	// A resume clears the API's pause only: the annotation still holds it.
	expect("POST", "/triggers/ns/all/resume", true, "annotation")
	expect("POST", "/triggers/ns/all/pause", true, "annotation", "api")
	// The annotation removed: the API's pause holds it still.
	apply(plainBroker() + triggerDoc("all", "t", sub.URL))
	expect("GET", "/triggers/ns/all", true, "api")
	send("4")
	if depth() != 4 || n.Load() != 0 {
		t.Fatalf("paused by the API: %d queued, %d delivered; want 4 and 0", depth(), n.Load())
	}
	// The same configuration again leaves the API's pause.
	apply(plainBroker() + triggerDoc("all", "t", sub.URL))
	expect("GET", "/triggers/ns/all", true, "api")
	expect("POST", "/triggers/ns/all/resume", false)
	sluicetest.Eventually(t, 30*time.Second, "4 delivered", func() bool { return n.Load() == 4 })

	state("POST", "/triggers/ns/nope/pause", 404)
	state("GET", "/triggers/ns/all/pause", 405)
	state("POST", "/triggers/ns/all", 405)
	state("POST", "/triggers/ns/all/stop", 404)
	// A broker in namespace "triggers" is still reached at /triggers/<name>.
	if got := post(h, "POST", "/triggers/x/", binary("t"), "{}").Code; got != 404 || !IsTriggerPath("/triggers/ns/all") || IsTriggerPath("/triggers/x/") {
		t.Errorf("POST /triggers/x/: %d, want the ingress's 404 for an unknown broker", got)
	}
}

// FuzzTriggerPath sends arbitrary paths and methods to the handler with one trigger
// running: nothing panics, the pause endpoints answer only 200, 404 or 405, and never
// 200 for a trigger other than ns/all.
func FuzzTriggerPath(f *testing.F) {
	for _, p := range []string{"/triggers/ns/all", "/triggers/ns/all/pause", "/triggers/ns/all/resume", "/triggers/x/",
		"/triggers//all/pause", "/triggers/ns/all/pause/", "/triggers/ns/all/pause/x", "/triggers/", "/triggers/ns//pause",
		"/triggers/ns/all/replay", "/triggers/ns/all/replay?from=2026-01-01T00:00:00Z", "/triggers/ns/nope/replay"} {
		f.Add("POST", p)
		f.Add("GET", p)
	}
	sub := httptest.NewServer(http.NotFoundHandler())
	defer sub.Close()
	s := newTestServer(f, nil, WithOpsGuarded(true))
	if err := s.Apply(context.Background(), loadConfig(f, plainBroker()+triggerDoc("all", "t", sub.URL))); err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	f.Fuzz(func(t *testing.T, method, path string) {
		u, err := url.Parse(path)
		if err != nil || !strings.HasPrefix(u.Path, "/") || (method != "GET" && method != "POST") {
			return
		}
		req := httptest.NewRequest(method, "/", nil)
		req.URL = u
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !IsTriggerPath(u.Path) {
			return // the ingress's and the probes' (their own tests)
		}
		switch {
		case rec.Code == 200, rec.Code == 404, rec.Code == 405:
		case rec.Code == 400 && strings.HasSuffix(u.Path, "/replay"): // a memory channel (replay.go)
		default:
			t.Fatalf("%s %q: %d %s", method, path, rec.Code, rec.Body)
		}
		if rec.Code == 200 && !strings.HasPrefix(u.Path, "/triggers/ns/all") {
			t.Fatalf("%s %q: 200 for another trigger", method, path)
		}
		if b, _ := s.findTriggerBroker("ns/all"); b.pauseByAPI(context.Background(), "ns/all", false) != nil {
			t.Fatal("resume failed")
		}
	})
}

// TestPauseNeedsOpsToken: without an operator token in front of it (WithOpsGuarded
// false) the server answers 403 naming --ops-token-file to a pause or resume, and the
// trigger keeps delivering; GET of its state stays open. With it, pause acts.
func TestPauseNeedsOpsToken(t *testing.T) {
	sub := httptest.NewServer(http.NotFoundHandler())
	defer sub.Close()
	tests := []struct {
		name    string
		guarded bool
		pause   int  // status of POST .../pause
		paused  bool // the trigger's state after it
	}{
		{"no token", false, http.StatusForbidden, false},
		{"token", true, http.StatusOK, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, nil, WithOpsGuarded(tt.guarded))
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub.URL))); err != nil {
				t.Fatal(err)
			}
			h := s.Handler()
			for _, action := range []string{"pause", "resume"} {
				rec := post(h, "POST", "/triggers/ns/all/"+action, nil, "")
				want := tt.pause
				if rec.Code != want {
					t.Fatalf("POST %s: %d %s, want %d", action, rec.Code, rec.Body, want)
				}
				if want == http.StatusForbidden && !strings.Contains(rec.Body.String(), "--ops-token-file") {
					t.Errorf("POST %s: %q does not name --ops-token-file", action, rec.Body)
				}
				if action == "pause" && s.findTrigger("ns/all").dispatcher.Paused() != tt.paused {
					t.Errorf("after POST pause: paused %v, want %v", !tt.paused, tt.paused)
				}
			}
			if rec := post(h, "GET", "/triggers/ns/all", nil, ""); rec.Code != http.StatusOK {
				t.Errorf("GET: %d %s, want 200", rec.Code, rec.Body)
			}
		})
	}
}

// TestPausedMemoryBudget: a paused trigger's events fill its memory channel's budget,
// then ingress answers 429 as for any full channel; on resume every event answered 202
// is delivered, once.
func TestPausedMemoryBudget(t *testing.T) {
	sub, n := countingSubscriber(t)
	s := newTestServer(t, memory.NewBudget(64<<10), withAdmitWait(0), withRejectHold(0))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+pausedTriggerDoc("all", sub.URL))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	body := `"` + strings.Repeat("x", 4<<10) + `"`
	accepted := 0
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("no 429 after 1000 events of 4 KiB on a 64 KiB budget")
		}
		rec := post(h, "POST", "/ns/b", binary(strconv.Itoa(i)), body)
		if rec.Code == http.StatusTooManyRequests {
			break
		}
		if rec.Code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, rec.Code, rec.Body)
		}
		accepted++
	}
	if accepted == 0 || n.Load() != 0 {
		t.Fatalf("%d accepted, %d delivered while paused; want some and none", accepted, n.Load())
	}
	setPaused(s.findTrigger("ns/all").dispatcher, false)
	sluicetest.Eventually(t, 30*time.Second, "all delivered", func() bool { return n.Load() == int64(accepted) })
	shutdown(t, s)
	if got := n.Load(); got != int64(accepted) {
		t.Errorf("delivered %d, want the %d accepted", got, accepted)
	}
}
