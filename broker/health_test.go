package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// flakyChannel is a memory channel whose backend the test takes away and gives back:
// while pubErr is set Publish returns it, while slow is set Publish waits for its
// context to end (the publish timeout) and is refused as a backend that did not answer
// in time, while checkErr is set Check does. It is durable, so ingress gives its
// publishes a timeout.
type flakyChannel struct {
	channel.Channel
	pubErr, checkErr atomic.Pointer[error]
	slow             atomic.Bool
}

func (f *flakyChannel) Publish(ctx context.Context, envs []channel.Envelope) error {
	if f.slow.Load() {
		<-ctx.Done()
		return channel.Refuse(channel.ErrUnavailable, "the backend did not acknowledge in time", ctx.Err())
	}
	if p := f.pubErr.Load(); p != nil {
		return *p
	}
	return f.Channel.Publish(ctx, envs)
}

func (f *flakyChannel) Check(context.Context) error {
	if p := f.checkErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *flakyChannel) Durable() bool { return true }

// uncheckedChannel is a flakyChannel without Check, as Kinesis's channel is.
type uncheckedChannel struct{ channel.Channel }

func (u uncheckedChannel) Durable() bool { return true }

func setErr(p *atomic.Pointer[error], err error) {
	if err == nil {
		p.Store(nil)
		return
	}
	p.Store(&err)
}

// testClock is a clock the test moves by hand.
type testClock struct{ off atomic.Int64 }

var clockBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *testClock) now() time.Time          { return clockBase.Add(time.Duration(c.off.Load())) }
func (c *testClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// TestStoreHealth: the broker is not ready in /status, /readyz and NotReady exactly
// while its channel cannot store, as ingress's answers and the channel's checks (run by
// hand here) tell it: a refusal as unavailable marks it down until a store succeeds, a
// check passes or refusalTTL passes with no other refusal; a failing check until a
// check passes; a publish that ran out of its timeout while the check passes not at all.
func TestStoreHealth(t *testing.T) {
	down := channel.Refuse(channel.ErrUnavailable, "the backend is away", errors.New("dial tcp 10.0.0.1:9092"))
	away := channel.Refuse(channel.ErrUnavailable, "the backend does not answer", errors.New("dial tcp 10.0.0.1:9092"))
	full := channel.Refuse(channel.ErrFull, "no room", nil)
	type step struct {
		pub, check error         // what Publish and Check return from now on
		slow       bool          // Publish runs out of its timeout from now on
		post       int           // status of a POST after the change; 0: none
		runCheck   bool          // then one check runs
		advance    time.Duration // then the clock moves on by this much
		ready      bool          // then
		why        string        // when not ready, what /readyz and /status say
	}
	tests := []struct {
		name      string
		unchecked bool // the channel has no Check
		steps     []step
	}{
		{"refused as unavailable, then stored", false, []step{
			{pub: down, post: 503, why: "the backend is away"},
			{post: 202, ready: true},
		}},
		{"full is not unready", false, []step{
			{pub: full, post: 429, ready: true},
		}},
		{"check fails with no traffic, then passes", false, []step{
			{check: away, runCheck: true, why: "the backend does not answer"},
			{check: away, advance: time.Hour, why: "the backend does not answer"},
			{runCheck: true, ready: true},
		}},
		{"refused while the check passes: ready at the next check", false, []step{
			{pub: down, post: 503, why: "the backend is away"},
			{pub: down, runCheck: true, ready: true},
			{pub: down, post: 503, why: "the backend is away"},
		}},
		{"refused, backend away, backend back: ready with no event sent", false, []step{
			{pub: down, post: 503, why: "the backend is away"},
			{pub: down, check: away, runCheck: true, why: "the backend does not answer"},
			{pub: down, runCheck: true, ready: true},
		}},
		{"publish timeout while the check passes: 503, still ready", false, []step{
			{slow: true, post: 503, ready: true},
			{slow: true, check: away, runCheck: true, why: "the backend does not answer"},
		}},
		{"no check: a refusal expires after refusalTTL unless renewed", true, []step{
			{pub: down, post: 503, why: "the backend is away"},
			{advance: refusalTTL - time.Second, why: "the backend is away"},
			{pub: down, post: 503, advance: refusalTTL - time.Second, why: "the backend is away"},
			{advance: time.Second, ready: true},
		}},
		{"no check: a publish timeout counts, and expires", true, []step{
			{slow: true, post: 503, why: "the backend did not acknowledge in time"},
			{advance: refusalTTL, ready: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &flakyChannel{Channel: memory.New()}
			var ch channel.Channel = fc
			if tt.unchecked {
				ch = uncheckedChannel{fc}
			}
			var clock testClock
			s, err := NewServer(WithChannelOpener(func(context.Context, config.Broker) (channel.Channel, error) { return ch, nil }),
				WithLogger(discardLogger()), withRejectHold(0), WithPublishTimeout(20*time.Millisecond),
				withCheckEvery(0), withClock(clock.now))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", "http://127.0.0.1:1/"))); err != nil {
				t.Fatal(err)
			}
			b := s.lookup("ns/b")
			for i, st := range tt.steps {
				setErr(&fc.pubErr, st.pub)
				setErr(&fc.checkErr, st.check)
				fc.slow.Store(st.slow)
				if st.post != 0 {
					rec := post(s.Handler(), "POST", "/ns/b", binary(fmt.Sprint("e", i)), `{}`)
					if rec.Code != st.post {
						t.Fatalf("step %d: POST answered %d %q, want %d", i, rec.Code, rec.Body, st.post)
					}
				}
				if st.runCheck {
					b.checkOnce(context.Background(), fc)
				}
				clock.advance(st.advance)
				if st.ready && !isReady(t, s) {
					t.Fatalf("step %d: not ready: %v", i, s.NotReady())
				}
				if !st.ready && !notReadyFor(t, s, st.why) {
					t.Fatalf("step %d: want not ready for %q; NotReady says %v", i, st.why, s.NotReady())
				}
			}
		})
	}
}

// TestChecker: the broker's checker runs on its own: a failing check makes the broker
// not ready with no event sent, and once checks pass again, ready.
func TestChecker(t *testing.T) {
	fc := &flakyChannel{Channel: memory.New()}
	s, err := NewServer(WithChannelOpener(func(context.Context, config.Broker) (channel.Channel, error) { return fc, nil }),
		WithLogger(discardLogger()), withCheckEvery(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", "http://127.0.0.1:1/"))); err != nil {
		t.Fatal(err)
	}
	setErr(&fc.checkErr, channel.Refuse(channel.ErrUnavailable, "the backend does not answer", nil))
	sluicetest.Eventually(t, 30*time.Second, "not ready", func() bool { return notReadyFor(t, s, "the backend does not answer") })
	setErr(&fc.checkErr, nil)
	sluicetest.Eventually(t, 30*time.Second, "ready", func() bool { return isReady(t, s) })
}

// isReady reports whether /status, /readyz and NotReady all say the broker is ready.
func isReady(t *testing.T, s *Server) bool {
	t.Helper()
	rep, rz, nr := views(t, s)
	return rep.Ready && rz.Code == http.StatusOK && len(nr) == 0
}

// notReadyFor reports whether /status, /readyz and NotReady all say the broker is not
// ready because its channel cannot store, for the reason why.
func notReadyFor(t *testing.T, s *Server, why string) bool {
	t.Helper()
	rep, rz, nr := views(t, s)
	if rep.Ready || rz.Code != http.StatusServiceUnavailable || !strings.Contains(nr["ns/b"], why) {
		return false
	}
	if !strings.Contains(rz.Body.String(), "broker ns/b cannot store events: "+why) {
		return false
	}
	for _, o := range rep.Objects {
		if o.Kind == "Broker" && !strings.Contains(o.Reason, "cannot store events: channel backend unavailable: "+why) {
			return false
		}
		if o.Kind == "Trigger" && (o.Ready || !strings.Contains(o.Reason, "its channel ns/b is not running: cannot store events")) {
			t.Fatalf("/status: trigger %+v: want not ready, its channel named", o)
		}
	}
	return true
}

// views are /status, /readyz and NotReady as s answers now.
func views(t *testing.T, s *Server) (StatusReport, *httptest.ResponseRecorder, map[string]string) {
	t.Helper()
	rec := post(s.Handler(), "GET", "/status", nil, "")
	var rep StatusReport
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep, post(s.Handler(), "GET", "/readyz", nil, ""), s.NotReady()
}
