package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/event"
)

// settleCounter wraps a real consumer and counts how its messages are settled, failing
// on a message settled twice.
type settleCounter struct {
	channel.Consumer
	t        testing.TB
	acked    atomic.Int64
	released atomic.Int64
}

type countedMsg struct {
	channel.Message
	c    *settleCounter
	done atomic.Bool
}

func (c *settleCounter) Receive(ctx context.Context) (channel.Message, error) {
	m, err := c.Consumer.Receive(ctx)
	if err != nil {
		return nil, err
	}
	return &countedMsg{Message: m, c: c}, nil
}

func (m *countedMsg) Ack() error {
	if !m.done.CompareAndSwap(false, true) {
		m.c.t.Errorf("message %s settled twice", m.Event().ID)
	}
	m.c.acked.Add(1)
	return m.Message.Ack()
}

func (m *countedMsg) Release() bool {
	if !m.done.CompareAndSwap(false, true) {
		m.c.t.Errorf("message %s settled twice", m.Event().ID)
	}
	m.c.released.Add(1)
	return m.Message.Release()
}

// newQueue returns a memory channel's consumer for "sub", wrapped to count settlements,
// and a function publishing events to it.
func newQueue(t testing.TB) (*settleCounter, func(...*event.Event)) {
	ch := memory.New()
	t.Cleanup(func() { ch.Close() })
	c, err := ch.Consume(context.Background(), "sub")
	if err != nil {
		t.Fatal(err)
	}
	pub := func(evs ...*event.Event) {
		envs := make([]channel.Envelope, len(evs))
		for i, e := range evs {
			envs[i] = channel.Envelope{Event: e, Subscriptions: []string{"sub"}}
		}
		if err := ch.Publish(context.Background(), envs); err != nil {
			t.Fatal(err)
		}
	}
	return &settleCounter{Consumer: c, t: t}, pub
}

func newEvent(id string, ext ...string) *event.Event {
	e := &event.Event{SpecVersion: "1.0", ID: id, Source: "/test", Type: "a",
		DataContentType: "application/json", Data: []byte(`{"n":"` + id + `"}`)}
	for i := 0; i+1 < len(ext); i += 2 {
		e.Set(ext[i], ext[i+1])
	}
	return e
}

// received is one request a test server saw.
type received struct {
	at time.Time
	ev *event.Event
	h  http.Header
}

// server is a real HTTP subscriber on 127.0.0.1 that records what it receives and
// answers through fn (n counts requests from 1).
type server struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
	n   atomic.Int64
}

func newServer(t testing.TB, fn func(w http.ResponseWriter, r *http.Request, n int, ev *event.Event)) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evs, err := event.ReadRequest(r, 1<<20)
		if err != nil || len(evs) != 1 {
			t.Errorf("server got an invalid request: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		n := int(s.n.Add(1))
		s.mu.Lock()
		s.got = append(s.got, received{at: time.Now(), ev: evs[0], h: r.Header.Clone()})
		s.mu.Unlock()
		if fn == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		fn(w, r, n, evs[0])
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// run starts d and returns a function that stops it and waits for Run to return.
func run(t testing.TB, d *Dispatcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func ids(n int, prefix string) []*event.Event {
	evs := make([]*event.Event, n)
	for i := range evs {
		evs[i] = newEvent(fmt.Sprintf("%s%d", prefix, i))
	}
	return evs
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// testLogger writes text records to w (guarded: handlers may log concurrently).
func testLogger(w *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: w}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		panic(err)
	}
	if c := pb.GetCounter(); c != nil {
		return c.GetValue()
	}
	return pb.GetGauge().GetValue()
}
