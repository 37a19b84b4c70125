package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
	"github.com/sluice-broker/sluice/loadtest/pacer"
)

// TestMemoryBoundedWhileSubscriberDown keeps sending while the only subscriber hangs:
// queued bytes never pass --memory-limit, excess requests get 429 with Retry-After
// (how long each took is logged, not judged), and the process stays small.
func TestMemoryBoundedWhileSubscriberDown(t *testing.T) {
	release := make(chan struct{})
	sub := newSubscriber(t, func(r *http.Request, n int) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return 202
	})
	defer close(release)
	const limit = 4 << 20
	cfg := writeConfig(t, brokerYAML("{retry: 0, timeout: PT30S}", [3]string{"all", "", sub.URL}))
	b := startBroker(t, "--config", cfg, "--memory-limit", "4MiB", "--max-in-flight", "4")
	payload := samplePayload(t)

	var accepted, full, other atomic.Int64
	var slowest429 atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				req, _ := http.NewRequest("POST", b.base+"/default/default", strings.NewReader(string(payload)))
				for k, v := range ceHeaders(fmt.Sprintf("w%d-%d", w, i), "t") {
					req.Header.Set(k, v)
				}
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				discard(resp)
				switch resp.StatusCode {
				case 202:
					accepted.Add(1)
				case 429:
					full.Add(1)
					if resp.Header.Get("Retry-After") == "" {
						t.Error("429 without Retry-After")
					}
					if d := time.Since(start).Microseconds(); d > slowest429.Load() {
						slowest429.Store(d)
					}
				default:
					other.Add(1)
				}
			}
		}()
	}
	var maxQueued float64
	for time.Now().Before(deadline) {
		if q := b.metric("sluice_queue_bytes "); q > maxQueued {
			maxQueued = q
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	rss := b.rssBytes()
	t.Logf("accepted %d, 429 %d, other %d; max queued %.0f bytes of %d; slowest 429 %d µs; RSS %d MiB",
		accepted.Load(), full.Load(), other.Load(), maxQueued, limit, slowest429.Load(), rss>>20)
	if full.Load() == 0 {
		t.Fatal("never answered 429 although the subscriber hung")
	}
	if other.Load() != 0 {
		t.Errorf("%d answers neither 202 nor 429", other.Load())
	}
	if maxQueued > limit {
		t.Errorf("queued %.0f bytes, over the %d limit", maxQueued, limit)
	}
	if rss > 150<<20 {
		t.Errorf("RSS %d MiB with a 4 MiB queue limit", rss>>20)
	}
	if accepted.Load() == 0 || sub.count() != 0 {
		t.Errorf("accepted %d, delivered %d while hung", accepted.Load(), sub.count())
	}
}

// TestShutdownDrains queues events for a slow subscriber, sends SIGTERM, and checks new
// events get 503 while every queued one is delivered before a clean exit.
func TestShutdownDrains(t *testing.T) {
	sub := newSubscriber(t, func(*http.Request, int) int { time.Sleep(10 * time.Millisecond); return 202 })
	b := startBroker(t, "--config", writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL})), "--max-in-flight", "2")
	const n = 200
	for i := 0; i < n; i++ {
		if status, body := postBinary(t, b.base+"/default/default", ceHeaders(fmt.Sprint(i), "t"), []byte("{}")); status != 202 {
			t.Fatalf("event %d: %d %s", i, status, body)
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- b.stop(30 * time.Second) }()
	time.Sleep(100 * time.Millisecond)
	if status, _ := postBinary(t, b.base+"/default/default", ceHeaders("late", "t"), nil); status != http.StatusServiceUnavailable {
		t.Errorf("during shutdown: %d, want 503", status)
	}
	if err := <-exited; err != nil {
		t.Fatalf("exit: %v", err)
	}
	if got := sub.count(); got != n {
		t.Fatalf("delivered %d of %d queued events before exit", got, n)
	}
	if !strings.Contains(b.logs.String(), "every queued event was delivered") {
		t.Errorf("shutdown log does not report the drain:\n%s", b.logs)
	}
}

// TestReload adds, changes and removes triggers while events flow to one that stays: each
// change takes effect within a second, an invalid edit is rejected and logged, and no
// event accepted for the staying trigger is lost.
func TestReload(t *testing.T) {
	subA := newSubscriber(t, nil)
	subB := newSubscriber(t, nil)
	subB2 := newSubscriber(t, nil)
	a := [3]string{"a", "type.a", subA.URL}
	path := writeConfig(t, brokerYAML("", a))
	b := startBroker(t, "--config", path)
	ingest := b.base + "/default/default"

	// A steady stream to trigger a for the whole test: 200 events/s.
	streamA := sluicetest.Load{Pacer: pacer.Constant{Rate: 200}, Workers: 4, Send: sluicetest.Poster{
		URL: ingest, Type: "type.a", Source: "/e2e", ContentType: "application/json", Data: []byte("{}"),
		ID: func(n uint64) string { return fmt.Sprint("a-", n) }}.Send}.Start(context.Background())

	// within sends type.b events until sub has one more than before, and returns how long
	// that took after the change.
	within := func(sub *subscriber, what string) time.Duration {
		t.Helper()
		start := time.Now()
		before := sub.count()
		for i := 0; time.Since(start) < 30*time.Second; i++ { // bounds a hang
			postBinary(t, ingest, ceHeaders(fmt.Sprint(what, i), "type.b"), []byte("{}"))
			if sub.count() > before {
				return time.Since(start)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: no effect within 30s", what)
		return 0
	}

	replaceFile(t, path, brokerYAML("", a, [3]string{"b", "type.b", subB.URL}))
	t.Logf("trigger added: effective after %s", within(subB, "add"))

	replaceFile(t, path, brokerYAML("", a, [3]string{"b", "type.b", subB.URL})+
		"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: bad, namespace: default}\nspec: {broker: default, subscriber: {ref: {kind: Service, name: x}}}\n")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(b.logs.String(), "spec.subscriber.ref") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(b.logs.String(), "spec.subscriber.ref") {
		t.Fatalf("invalid edit not reported in the log")
	}
	within(subB, "after invalid edit") // the running config was kept

	replaceFile(t, path, brokerYAML("", a, [3]string{"b", "type.b", subB2.URL}))
	t.Logf("trigger changed: effective after %s", within(subB2, "change"))

	replaceFile(t, path, brokerYAML("", a))
	time.Sleep(1 * time.Second)
	before := subB2.count()
	for i := 0; i < 20; i++ {
		postBinary(t, ingest, ceHeaders(fmt.Sprint("gone", i), "type.b"), []byte("{}"))
	}
	time.Sleep(300 * time.Millisecond)
	if subB2.count() != before {
		t.Errorf("removed trigger still delivers: %d → %d", before, subB2.count())
	}

	streamA.Stop()
	if r := streamA.Refusals(); r != "" {
		t.Errorf("type.a events not accepted: %s (last: %s)", r, streamA.LastRefusal())
	}
	n := streamA.Accepted()
	got := subA.waitFor(t, n, 10*time.Second)
	seen := map[string]bool{}
	for _, r := range got {
		seen[r.Header.Get("Ce-Id")] = true
	}
	if len(seen) != n {
		t.Fatalf("trigger a: %d distinct events delivered of %d accepted", len(seen), n)
	}
	t.Logf("trigger a: all %d accepted events delivered across four reloads", n)
}

// TestServeKeepsSysmonAwake checks that `sluice serve` re-executes itself with the
// runtime setting that keeps sysmon out of deep sleep (internal/sysmon): same PID, the
// setting in its environment, no scheduler trace printed, and it serves events.
func TestServeKeepsSysmonAwake(t *testing.T) {
	sub := newSubscriber(t, nil)
	b := startBroker(t, "--config", writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL})))
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", b.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if !strings.Contains(string(env), "GODEBUG=schedtrace=2147483647") && !strings.Contains(string(env), ",schedtrace=2147483647") {
		t.Errorf("serve's environment has no schedtrace setting: %q", strings.ReplaceAll(string(env), "\x00", " "))
	}
	if status, body := postBinary(t, b.base+"/default/default", ceHeaders("1", "t"), []byte("{}")); status != 202 {
		t.Fatalf("event: %d %s", status, body)
	}
	sub.waitFor(t, 1, 5*time.Second)
	if strings.Contains(b.logs.String(), "SCHED ") {
		t.Errorf("the runtime printed a scheduler trace:\n%s", b.logs)
	}
}
