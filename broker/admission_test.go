package broker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// rawPost writes one binary-mode POST of body on conn and returns the answer read from
// br, and how long after the write it was complete.
func rawPost(t *testing.T, conn net.Conn, br *bufio.Reader, id, body string) (*http.Response, time.Duration) {
	t.Helper()
	start := time.Now()
	req := fmt.Sprintf("POST /ns/b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nCe-Specversion: 1.0\r\n"+
		"Ce-Id: %s\r\nCe-Source: /test\r\nCe-Type: t\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp, time.Since(start)
}

// dialBroker serves a memory broker of a 1 KiB budget with one trigger to subscriber
// over a real listener and returns a connection to it; both close when t ends.
func dialBroker(t *testing.T, subscriber string, opts ...Option) (net.Conn, *bufio.Reader) {
	t.Helper()
	s := newTestServer(t, memory.NewBudget(1024), opts...)
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", subscriber))); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}

// gatedSubscriber serves a subscriber that answers 202 to every delivery once release
// is called (at once after that), counting them; it is released and closed when t ends
// (a test whose broker's cleanup comes later defers release too).
func gatedSubscriber(t *testing.T) (url string, delivered *atomic.Int64, release func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	delivered = new(atomic.Int64)
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-gate
		_, _ = io.Copy(io.Discard, r.Body)
		delivered.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(sub.Close)
	t.Cleanup(release) // runs first: a delivery waiting on the gate ends before Close
	return sub.URL, delivered, release
}

// TestRejectHoldsConnection checks the hold after a 429 (overload.Control.Hold) over a real connection: a 429
// arrives whole at once, with Retry-After, and the next request on the same connection
// is read only after the hold; with the hold off it is read at once. The hold is long
// (10 s) so that "at once" (under half of it) is a bound on a hang, not on the machine's
// speed.
func TestRejectHoldsConnection(t *testing.T) {
	const hold = 10 * time.Second
	for _, tc := range []struct {
		name string
		hold time.Duration
	}{{"held", hold}, {"off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			sub, _, release := gatedSubscriber(t) // the filler stays queued
			defer release()
			conn, br := dialBroker(t, sub, withRejectHold(tc.hold), withAdmitWait(0))
			big := strings.Repeat("x", 700) // with the filler, more than the budget holds

			if resp, _ := rawPost(t, conn, br, "filler", strings.Repeat("x", 100)); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("the filler: %d", resp.StatusCode)
			}
			resp, took := rawPost(t, conn, br, "first", big)
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("full: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if took >= hold/2 {
				t.Errorf("the 429 took %v: it should be flushed before the hold (%v)", took, hold)
			}
			resp, took = rawPost(t, conn, br, "second", `{}`)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("an event that fits: %d", resp.StatusCode)
			}
			switch {
			case tc.hold > 0 && took < tc.hold/2:
				t.Errorf("the next request on a held connection was answered after %v, want at least %v", took, tc.hold/2)
			case tc.hold == 0 && took >= hold/2:
				t.Errorf("with the hold off the next request took %v", took)
			}
		})
	}
}

// TestMaxBacklog checks rule 1 for the backlog bound: while the trigger has more than
// the bound stored and unsettled, ingress answers 429 with Retry-After; once the
// subscriber catches up it accepts again, and every accepted event is delivered.
func TestMaxBacklog(t *testing.T) {
	const bound = 3
	sub, delivered, release := gatedSubscriber(t)
	defer release() // before the broker's cleanup shuts it down
	s := newTestServer(t, nil, withMaxBacklog(bound), withRejectHold(0))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	accepted, rejected := 0, 0
	for i := range 10 {
		time.Sleep(2 * backlogEvery) // a fresh measurement each time
		rec := post(h, "POST", "/ns/b", binary(fmt.Sprint("e", i)), `{}`)
		switch rec.Code {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			rejected++
			if rec.Header().Get("Retry-After") == "" {
				t.Errorf("429 without Retry-After")
			}
		default:
			t.Fatalf("event %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if accepted != bound+1 || rejected != 10-accepted {
		t.Errorf("with a backlog bound of %d: %d accepted, %d rejected; want %d accepted (the bound is exceeded by the last one) and the rest rejected",
			bound, accepted, rejected, bound+1)
	}
	release()
	sluicetest.Eventually(t, 10*time.Second, fmt.Sprintf("%d deliveries", accepted), func() bool { return delivered.Load() >= int64(accepted) })
	if n := delivered.Load(); n != int64(accepted) {
		t.Fatalf("%d of %d accepted events delivered", n, accepted)
	}
	time.Sleep(2 * backlogEvery)
	if rec := post(h, "POST", "/ns/b", binary("after"), `{}`); rec.Code != http.StatusAccepted {
		t.Errorf("after the backlog drained: %d %s, want 202", rec.Code, rec.Body)
	}
}

// TestMaxBacklogFollowsApply checks that the backlog verdict counts a trigger a later
// Apply adds and stops counting one it removes: the verdict reads the triggers as apply
// last left them (a snapshot, so that the ingress path takes no lock, copy or sort per
// measurement), and that snapshot must follow every apply.
func TestMaxBacklogFollowsApply(t *testing.T) {
	const bound = 2
	slow, _, release := gatedSubscriber(t)
	defer release() // before the broker's cleanup shuts it down
	fast := newSubscriber(t)
	defer fast.Close()
	s := newTestServer(t, nil, withMaxBacklog(bound), withRejectHold(0), withAdmitWait(0))
	h := s.Handler()
	apply := func(yaml string) {
		t.Helper()
		if err := s.Apply(context.Background(), loadConfig(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	// postN sends n events, each after a fresh measurement and once the fast subscriber
	// has everything accepted before, and returns how many were accepted.
	post1 := func(id string) int {
		time.Sleep(2 * backlogEvery)
		return post(h, "POST", "/ns/b", binary(id), `{}`).Code
	}
	sent := int64(0)
	waitFast := func() {
		t.Helper()
		sluicetest.Eventually(t, 10*time.Second, "the fast subscriber caught up", func() bool { return fast.got.Load() == sent })
	}
	postN := func(phase string, n int) (accepted int) {
		t.Helper()
		for i := range n {
			switch code := post1(fmt.Sprint(phase, i)); code {
			case http.StatusAccepted:
				accepted++
				sent++
				waitFast()
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("%s event %d: %d", phase, i, code)
			}
		}
		return accepted
	}

	apply(plainBroker() + triggerDoc("fast", "t", fast.URL))
	if got := postN("fast only", 4); got != 4 {
		t.Fatalf("one trigger that keeps up: %d of 4 accepted, want all", got)
	}
	apply(plainBroker() + triggerDoc("fast", "t", fast.URL) + triggerDoc("slow", "t", slow))
	if got := postN("slow added", 6); got != bound+1 {
		t.Fatalf("after adding a trigger that does not answer: %d of 6 accepted, want %d (its backlog counted)", got, bound+1)
	}
	apply(plainBroker() + triggerDoc("fast", "t", fast.URL))
	if got := postN("slow removed", 4); got != 4 {
		t.Fatalf("after removing it: %d of 4 accepted, want all (its backlog no longer counted)", got)
	}
}

// TestAdmissionOptions checks that the constructor names a bad overload option (the
// options' own checks are overload's TestOptionsValidate).
func TestAdmissionOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{withMaxBacklog(-1), "MaxBacklog (--max-backlog)"},
		{withMaxStoring(-1), "MaxStoring (--max-storing)"},
		{withRejectHold(-time.Second), "RejectHold (--reject-hold)"},
		{withRejectHold(time.Minute), "RejectHold (--reject-hold)"},
		{withAdmitWait(time.Minute), "AdmitWait (--admit-wait)"},
	} {
		_, err := NewServer(WithChannelOpener(memoryOpener(memory.NewBudget(1024))), tc.opt)
		if err == nil || !strings.Contains(err.Error(), "WithOverload") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error naming WithOverload and %s", err, tc.want)
		}
	}
}

// withAdmitWait, withRejectHold, withMaxBacklog, withMaxStoring and withFixedInFlight
// set one field of the server's overload.Options, keeping the others' defaults.
func withAdmitWait(d time.Duration) Option {
	return func(o *options) { o.overload.AdmitWait = d }
}

func withRejectHold(d time.Duration) Option {
	return func(o *options) { o.overload.RejectHold = d }
}

func withMaxBacklog(n int) Option { return func(o *options) { o.overload.MaxBacklog = n } }

func withMaxStoring(n int) Option { return func(o *options) { o.overload.MaxStoring = n } }

func withFixedInFlight(fixed bool) Option {
	return func(o *options) { o.overload.FixedInFlight = fixed }
}

// backlogEvery is how often overload measures the backlog: a test waits twice that for
// a fresh verdict.
const backlogEvery = time.Millisecond

// TestBatchAnnotationDelivers: a Trigger annotated sluice.dev/delivery-batch delivers
// through the broker as batches of structured events.
func TestBatchAnnotationDelivers(t *testing.T) {
	var batches, events atomic.Int64
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "application/cloudevents-batch+json" {
			t.Errorf("Content-Type %q, want a batch", ct)
		}
		evs, err := event.ReadRequest(r, 1<<20)
		if err != nil {
			t.Errorf("invalid batch: %v", err)
		}
		batches.Add(1)
		events.Add(int64(len(evs)))
		w.WriteHeader(http.StatusOK)
	}))
	defer sub.Close()
	s := newTestServer(t, nil)
	trig := "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: all, namespace: ns, annotations: {sluice.dev/delivery-batch: \"50\", sluice.dev/delivery-batch-wait: PT0.2S}}\n" +
		"spec: {broker: b, subscriber: {uri: \"" + sub.URL + "\"}}\n"
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+trig)); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for i := range 100 {
		if rec := post(h, "POST", "/ns/b", binary(fmt.Sprint("e", i)), `{}`); rec.Code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for events.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := events.Load(); n != 100 {
		t.Fatalf("%d of 100 events delivered", n)
	}
	if b := batches.Load(); b > 10 {
		t.Errorf("100 events in %d requests: not batched", b)
	}
}

// TestAdmitWait checks the admission queue over a real connection: with the memory
// channel's budget taken by an event its subscriber holds, the next request waits for
// room and is answered 202 once the subscriber settles the first; with the wait off it
// is refused at once; and one whose subscriber never settles is refused after the wait,
// the connection then held for what is left of RejectHold.
func TestAdmitWait(t *testing.T) {
	// Each max only bounds a hang: "wait off" is refused long before its subscriber
	// settles (at 30 s), the others wait for at least min.
	tests := []struct {
		name        string
		wait        time.Duration
		settleAfter time.Duration // 0: never
		want        int
		min, max    time.Duration
	}{
		{"room comes", 10 * time.Second, 300 * time.Millisecond, http.StatusAccepted, 150 * time.Millisecond, 30 * time.Second},
		{"wait off", 0, 30 * time.Second, http.StatusTooManyRequests, 0, 15 * time.Second},
		{"no room", 400 * time.Millisecond, 0, http.StatusTooManyRequests, 400 * time.Millisecond, 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var once atomic.Bool
			free := func() {
				if once.CompareAndSwap(false, true) {
					close(release)
				}
			}
			defer free()
			sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-release
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusAccepted)
			}))
			defer sub.Close()
			defer free()                         // before Close, which waits for the subscriber's answers
			const hold = 1400 * time.Millisecond // 1 s left after the "no room" wait: held ½ to 1 s
			conn, br := dialBroker(t, sub.URL, withAdmitWait(tc.wait), withRejectHold(hold))
			body := `"` + strings.Repeat("x", 600) + `"` // two do not fit the budget
			if resp, _ := rawPost(t, conn, br, "first", body); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("first: %d", resp.StatusCode)
			}
			if tc.settleAfter > 0 {
				settle := time.AfterFunc(tc.settleAfter, free)
				defer settle.Stop()
			}
			resp, took := rawPost(t, conn, br, "second", body)
			answered := time.Now() // the 429, if it is one, has arrived: the hold runs from here
			if resp.StatusCode != tc.want || took < tc.min || took > tc.max {
				t.Fatalf("second: %d after %v; want %d after %v to %v", resp.StatusCode, took, tc.want, tc.min, tc.max)
			}
			if tc.want == http.StatusTooManyRequests {
				if resp.Header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
				if tc.wait == 0 {
					return // held for RejectHold, as TestRejectHoldsConnection checks
				}
				free()
				// Refused after waiting: held for the rest of RejectHold only, counted from
				// the 429's arrival (at least half of it; the ceiling bounds a hang).
				deadline := time.Now().Add(30 * time.Second)
				for {
					resp, _ = rawPost(t, conn, br, "third", `{}`)
					if resp.StatusCode == http.StatusAccepted {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("third: %d", resp.StatusCode)
					}
				}
				took = time.Since(answered)
				if left := hold - tc.wait; took < left/2 || took > left+20*time.Second {
					t.Errorf("the request after a refusal that waited %v took %v; want the rest of the hold, %v to %v", tc.wait, took, left/2, left)
				}
			}
		})
	}
}

// gatedChannel is a memory channel whose Publish, after saying so on entered, waits for
// gate to close: a store that takes as long as the test wants.
type gatedChannel struct {
	channel.Channel
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedChannel) Publish(ctx context.Context, envs []channel.Envelope) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.Channel.Publish(ctx, envs)
}

// admissionGauges is the exposition of broker ns/b's admission gauges, with the
// requests storing and waiting to fill in.
const admissionGauges = `# HELP sluice_ingress_storing_requests Ingress requests let in and not yet stored in the channel, per broker: what --max-storing bounds.
# TYPE sluice_ingress_storing_requests gauge
sluice_ingress_storing_requests{broker="ns/b"} %d
# HELP sluice_ingress_waiting_requests Ingress requests waiting for room before their bodies are read (the admission queue), per broker.
# TYPE sluice_ingress_waiting_requests gauge
sluice_ingress_waiting_requests{broker="ns/b"} %d
`

// TestMaxStoring: with withMaxStoring(1) a request that arrives while another is being
// stored waits for it before it is stored (or, with the wait off, is refused 429 at
// once); without a bound both are stored at once. While the first is stored the gauges
// show the requests storing and waiting; every count is given back after.
func TestMaxStoring(t *testing.T) {
	const quiet = 200 * time.Millisecond // long enough for a request let in to reach Publish
	tests := []struct {
		name       string
		maxStoring int
		admitWait  time.Duration
		concurrent bool // the second is stored while the first is
		second     int  // its answer
		// the gauges while the first is stored: requests storing, waiting for room
		storing, waiting int
	}{
		{"bound waits", 1, 5 * time.Second, false, http.StatusAccepted, 1, 1},
		{"bound, wait off", 1, 0, false, http.StatusTooManyRequests, 1, 0},
		{"no bound", 0, 5 * time.Second, true, http.StatusAccepted, 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatedChannel{entered: make(chan struct{}, 2), gate: make(chan struct{})}
			var once sync.Once
			open := func() { once.Do(func() { close(g.gate) }) }
			defer open()
			opener := func(context.Context, config.Broker) (channel.Channel, error) {
				g.Channel = memory.New(memory.WithBudget(memory.NewBudget(1 << 20)))
				return g, nil
			}
			reg := prometheus.NewRegistry()
			s := newTestServer(t, nil, WithChannelOpener(opener), withMaxStoring(tc.maxStoring),
				withAdmitWait(tc.admitWait), withRejectHold(0), WithRegisterer(reg))
			sub := newSubscriber(t)
			defer sub.Close()
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub.URL))); err != nil {
				t.Fatal(err)
			}
			h := s.Handler()
			send := func(id string) chan *httptest.ResponseRecorder {
				c := make(chan *httptest.ResponseRecorder, 1)
				go func() { c <- post(h, "POST", "/ns/b", binary(id), `{}`) }()
				return c
			}
			first := send("first")
			select {
			case <-g.entered:
			case <-time.After(5 * time.Second):
				t.Fatal("the first request never reached Publish")
			}
			second := send("second")
			var early *httptest.ResponseRecorder
			select {
			case <-g.entered:
				if !tc.concurrent {
					t.Fatalf("the second request is stored while the first is, with withMaxStoring(%d)", tc.maxStoring)
				}
			case early = <-second:
				if tc.second != http.StatusTooManyRequests {
					t.Fatalf("the second request answered %d while the first is stored: %s", early.Code, early.Body)
				}
			case <-time.After(quiet):
				if tc.concurrent {
					t.Fatal("the second request waits for the first without a bound")
				}
			}
			want := fmt.Sprintf(admissionGauges, tc.storing, tc.waiting)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
				"sluice_ingress_storing_requests", "sluice_ingress_waiting_requests"); err != nil {
				t.Errorf("while the first is stored: %v", err)
			}
			open()
			if rec := <-first; rec.Code != http.StatusAccepted {
				t.Fatalf("first: %d %s", rec.Code, rec.Body)
			}
			if early == nil {
				early = <-second
			}
			if early.Code != tc.second {
				t.Fatalf("second: %d %s, want %d", early.Code, early.Body, tc.second)
			}
			if early.Code == http.StatusTooManyRequests && early.Header().Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			if n := s.lookup("ns/b").gate.Storing(); n != 0 {
				t.Errorf("%d requests still counted as storing after both were answered", n)
			}
		})
	}
}

// TestNeverFitsIs413: a request whose Content-Length is over --max-event-bytes is
// answered 413 before its body is read, even while the broker is full (a 429 would have
// its client retry it forever); TestIngressFullAndUnavailable has one over the channel.
func TestNeverFitsIs413(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int
		want   string
	}{
		{"over --max-event-bytes", 600, "body exceeds the size limit: 600 bytes, limit 512\n"},
		{"far over --max-event-bytes and the channel", 1 << 20, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, _, release := gatedSubscriber(t)
			defer release()
			conn, br := dialBroker(t, sub, WithMaxEventBytes(512), withAdmitWait(0), withRejectHold(0))
			if resp, _ := rawPost(t, conn, br, "filler", strings.Repeat("x", 100)); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("the filler: %d", resp.StatusCode)
			}
			// The head only: the answer must come without the body.
			head := fmt.Sprintf("POST /ns/b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nCe-Specversion: 1.0\r\n"+
				"Ce-Id: big\r\nCe-Source: /test\r\nCe-Type: t\r\nContent-Length: %d\r\n\r\n", tc.length)
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			want := tc.want
			if want == "" {
				want = fmt.Sprintf("body exceeds the size limit: %d bytes, limit 512\n", tc.length)
			}
			if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("Retry-After") != "" || string(body) != want {
				t.Errorf("%d Retry-After %q %q; want 413 without Retry-After, %q", resp.StatusCode, resp.Header.Get("Retry-After"), body, want)
			}
		})
	}
}
