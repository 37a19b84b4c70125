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
// while pubErr is set Publish returns it, while checkErr is set Check does.
type flakyChannel struct {
	channel.Channel
	pubErr, checkErr atomic.Pointer[error]
}

func (f *flakyChannel) Publish(ctx context.Context, envs []channel.Envelope) error {
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

func setErr(p *atomic.Pointer[error], err error) {
	if err == nil {
		p.Store(nil)
		return
	}
	p.Store(&err)
}

// TestStoreHealth: the broker is not ready in /status, /readyz and NotReady exactly
// while its channel cannot store, as ingress's answers and the channel's checks tell it,
// and ready again once a store succeeds or the backend comes back.
func TestStoreHealth(t *testing.T) {
	down := channel.Refuse(channel.ErrUnavailable, "the backend is away", errors.New("dial tcp 10.0.0.1:9092"))
	away := channel.Refuse(channel.ErrUnavailable, "the backend does not answer", errors.New("dial tcp 10.0.0.1:9092"))
	full := channel.Refuse(channel.ErrFull, "no room", nil)
	type step struct {
		pub, check error  // what Publish and Check return from now on
		post       int    // status of a POST after the change; 0: none
		ready      bool   // then, once the checks have run
		why        string // when not ready, what /readyz and /status say
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"refused as unavailable, then stored", []step{
			{pub: down, post: 503, why: "the backend is away"},
			{post: 202, ready: true},
		}},
		{"full is not unready", []step{
			{pub: full, post: 429, ready: true},
		}},
		{"check fails with no traffic, then passes", []step{
			{check: away, why: "the backend does not answer"},
			{ready: true},
		}},
		{"refused while the check passes: not ready until a store succeeds", []step{
			{pub: down, post: 503, why: "the backend is away"},
			{why: "the backend is away"},
			{post: 202, ready: true},
		}},
		{"refused, backend away, backend back: ready with no event sent", []step{
			{pub: down, post: 503, why: "the backend is away"},
			{pub: down, check: away, why: "the backend does not answer"},
			{ready: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := &flakyChannel{Channel: memory.New()}
			s, err := NewServer(WithChannelOpener(func(context.Context, config.Broker) (channel.Channel, error) { return ch, nil }),
				WithLogger(discardLogger()), WithRejectHold(0))
			if err != nil {
				t.Fatal(err)
			}
			s.opts.checkEvery = 5 * time.Millisecond
			defer s.Shutdown(context.Background())
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", "http://127.0.0.1:1/"))); err != nil {
				t.Fatal(err)
			}
			for i, st := range tt.steps {
				setErr(&ch.pubErr, st.pub)
				setErr(&ch.checkErr, st.check)
				if st.post != 0 {
					rec := post(s.Handler(), "POST", "/ns/b", binary(fmt.Sprint("e", i)), `{}`)
					if rec.Code != st.post {
						t.Fatalf("step %d: POST answered %d %q, want %d", i, rec.Code, rec.Body, st.post)
					}
				}
				if !st.ready {
					sluicetest.Eventually(t, 20*time.Second, "not ready: "+st.why, func() bool { return notReadyFor(t, s, st.why) })
					continue
				}
				// Ready: a few check rounds pass and it stays so.
				sluicetest.Eventually(t, 20*time.Second, "ready", func() bool { return isReady(t, s) })
				time.Sleep(50 * time.Millisecond)
				if !isReady(t, s) {
					t.Fatalf("step %d: not ready after a few checks", i)
				}
			}
		})
	}
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
