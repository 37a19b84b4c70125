package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
)

// TestParseReplay: from is required, to defaults to now (and is never later), rate to DefaultReplayRate and
// is bounded; every error names its parameter.
func TestParseReplay(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		query    string
		from, to string
		rate     float64
		err      string
	}{
		{"from=2026-11-27T10:00:00Z", "2026-11-27T10:00:00Z", "2026-11-27T12:00:00Z", DefaultReplayRate, ""},
		{"from=2026-11-27T10:00:00Z&to=2026-11-27T11:00:00%2B00:30&rate=5", "2026-11-27T10:00:00Z", "2026-11-27T10:30:00Z", 5, ""},
		{"from=2026-11-27T10:00:00Z&to=2026-11-28T12:00:00Z", "2026-11-27T10:00:00Z", "2026-11-27T12:00:00Z", DefaultReplayRate, ""}, // to: at most now
		{"from=2026-11-27T13:00:00Z&to=2026-11-27T14:00:00Z", "", "", 0, "from: 2026-11-27T13:00:00Z is not before to (2026-11-27T12:00:00Z)"},
		{"from=2026-11-27T10:00:00Z&rate=10000", "2026-11-27T10:00:00Z", "2026-11-27T12:00:00Z", MaxReplayRate, ""},
		{"", "", "", 0, "from: missing"},
		{"from=yesterday", "", "", 0, `from: "yesterday" is not an RFC 3339 time`},
		{"from=2026-11-27T10:00:00Z&to=soon", "", "", 0, `to: "soon" is not an RFC 3339 time`},
		{"from=2026-11-27T13:00:00Z", "", "", 0, "from: 2026-11-27T13:00:00Z is not before to"},
		{"from=2026-11-27T10:00:00Z&to=2026-11-27T10:00:00Z", "", "", 0, "is not before to"},
		{"from=2026-11-27T10:00:00Z&rate=0", "", "", 0, `rate: "0": want events a second above 0 up to 10000`},
		{"from=2026-11-27T10:00:00Z&rate=10001", "", "", 0, `rate: "10001"`},
		{"from=2026-11-27T10:00:00Z&rate=NaN", "", "", 0, `rate: "NaN"`},
		{"from=2026-11-27T10:00:00Z&rate=-1", "", "", 0, `rate: "-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			p, err := parseReplay(httptest.NewRequest(http.MethodPost, "/triggers/ns/t/replay?"+tt.query, nil), now)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.from.UTC().Format(time.RFC3339); got != tt.from {
				t.Errorf("from %s, want %s", got, tt.from)
			}
			if got := p.to.UTC().Format(time.RFC3339); got != tt.to {
				t.Errorf("to %s, want %s", got, tt.to)
			}
			if p.rate != tt.rate {
				t.Errorf("rate %g, want %g", p.rate, tt.rate)
			}
		})
	}
}

// FuzzParseReplay: any query string gives a window with from before to, to not after
// now, and a rate
// within its bounds, or an error naming a parameter.
func FuzzParseReplay(f *testing.F) {
	for _, q := range []string{"from=2026-11-27T10:00:00Z", "from=2026-11-27T10:00:00Z&to=2026-11-27T11:00:00Z&rate=5",
		"from=&to=&rate=", "rate=1e309&from=2026-11-27T10:00:00.999999999-23:59", "from=0000-01-01T00:00:00Z&rate=0x10"} {
		f.Add(q)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, q string) {
		req := httptest.NewRequest(http.MethodPost, "/triggers/ns/t/replay", nil)
		req.URL.RawQuery = q
		p, err := parseReplay(req, now)
		if err != nil {
			if m := err.Error(); !strings.HasPrefix(m, "from: ") && !strings.HasPrefix(m, "to: ") && !strings.HasPrefix(m, "rate: ") {
				t.Fatalf("%q: error %q names no parameter", q, m)
			}
			return
		}
		if !p.from.Before(p.to) || p.to.After(now) || !(p.rate > 0 && p.rate <= MaxReplayRate) {
			t.Fatalf("%q: accepted from %s to %s at %g", q, p.from, p.to, p.rate)
		}
	})
}

// TestReplayRefusals: the replay endpoint answers 405 to a GET, 403 without an operator
// token, 404 for an unknown trigger, 400 naming a bad parameter, and 400 on a memory
// channel, which keeps no event once delivered.
func TestReplayRefusals(t *testing.T) {
	sub := httptest.NewServer(http.NotFoundHandler())
	defer sub.Close()
	from := url.QueryEscape(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	tests := []struct {
		guarded      bool
		method, path string
		code         int
		body         string
	}{
		{true, "GET", "/triggers/ns/all/replay?from=" + from, 405, "POST to replay"},
		{false, "POST", "/triggers/ns/all/replay?from=" + from, 403, "--ops-token-file"},
		{true, "POST", "/triggers/ns/nope/replay?from=" + from, 404, "trigger ns/nope"},
		{true, "POST", "/triggers/ns/all/replay", 400, "from: missing"},
		{true, "POST", "/triggers/ns/all/replay?from=" + from + "&rate=0", 400, "rate:"},
		{true, "POST", "/triggers/ns/all/replay?from=" + from, 400, "does not replay"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			s := newTestServer(t, nil, WithOpsGuarded(tt.guarded))
			if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", sub.URL))); err != nil {
				t.Fatal(err)
			}
			rec := post(s.Handler(), tt.method, tt.path, nil, "")
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("%d %q, want %d with %q", rec.Code, rec.Body, tt.code, tt.body)
			}
		})
	}
}

// TestReplayFeed: a replayed event pushed while the dispatcher waits on the channel is
// received at once, before the channel's next message; Len counts the replayed events
// waiting; a Receive whose context ends returns its error.
func TestReplayFeed(t *testing.T) {
	ch := memory.New()
	defer ch.Close()
	ctx := channeltest.Ctx(t, 30*time.Second)
	cons, err := ch.Consume(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	f := newReplayFeed(cons)
	run := &replayRun{settled: make(chan struct{}, 1)}
	got := make(chan channel.Message)
	go func() {
		m, err := f.Receive(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	time.Sleep(50 * time.Millisecond) // usually blocked on the channel by now; either way it must get the event
	if err := f.push(ctx, &replayed{run: run, ev: &event.Event{ID: "r1"}}); err != nil {
		t.Fatal(err)
	}
	m := <-got
	if m.Event().ID != "r1" {
		t.Fatalf("received %s, want the replayed r1", m.Event().ID)
	}
	_ = m.Ack()
	_ = m.Ack() // counted once
	if run.delivered.Load() != 1 {
		t.Errorf("delivered %d, want 1", run.delivered.Load())
	}
	channeltest.Publish(t, ch, []string{"s"}, &event.Event{SpecVersion: "1.0", ID: "live", Source: "/s", Type: "t"})
	if err := f.push(ctx, &replayed{run: run, ev: &event.Event{ID: "r2"}}); err != nil {
		t.Fatal(err)
	}
	if n := f.Len(); n != 2 {
		t.Errorf("Len %d, want 2 (one stored, one replayed)", n)
	}
	for _, want := range []string{"r2", "live"} {
		m, err := f.Receive(ctx)
		if err != nil || m.Event().ID != want {
			t.Fatalf("received %v, %v; want %s", m, err, want)
		}
		if want == "live" {
			_ = m.Ack()
		} else if !m.Release() {
			t.Errorf("%s: Release reported the event lost; it stays stored in the channel", want)
		}
	}
	if run.released.Load() != 1 {
		t.Errorf("released %d, want 1", run.released.Load())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.Receive(cctx); err == nil {
		t.Error("Receive with an ended context returned no error")
	}
}

// TestStartFromNeedsAStarter: on a memory channel a trigger annotated sluice.dev/start-from
// earliest does not start, the error naming the annotation; latest starts as usual.
func TestStartFromNeedsAStarter(t *testing.T) {
	sub := httptest.NewServer(http.NotFoundHandler())
	defer sub.Close()
	for _, tt := range []struct{ value, err string }{
		{"latest", ""},
		{"earliest", "sluice.dev/start-from: earliest: not on this broker's channel"},
		{"2026-11-27T09:00:00Z", "sluice.dev/start-from: 2026-11-27T09:00:00Z: not on this broker's channel"},
	} {
		t.Run(tt.value, func(t *testing.T) {
			s := newTestServer(t, nil)
			doc := strings.Replace(triggerDoc("all", "t", sub.URL), "namespace: ns}", `namespace: ns, annotations: {sluice.dev/start-from: "`+tt.value+`"}}`, 1)
			err := s.Apply(context.Background(), loadConfig(t, plainBroker()+doc))
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Apply: %v; want %q", err, tt.err)
			}
			if running := s.findTrigger("ns/all") != nil; running != (tt.err == "") {
				t.Errorf("trigger running: %v", running)
			}
		})
	}
}

// BenchmarkReplayFeedReceive: what the replay feed adds to a dispatcher's Receive when no
// replay runs (the channel's message taken through it), against the consumer alone.
func BenchmarkReplayFeedReceive(b *testing.B) {
	for _, feed := range []bool{false, true} {
		name := "consumer"
		if feed {
			name = "feed"
		}
		b.Run(name, func(b *testing.B) {
			ch := memory.New()
			defer ch.Close()
			ctx := context.Background()
			cons, err := ch.Consume(ctx, "s")
			if err != nil {
				b.Fatal(err)
			}
			var c channel.Consumer = cons
			if feed {
				c = newReplayFeed(cons)
			}
			e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t"}
			env := []channel.Envelope{{Event: e, Subscriptions: []string{"s"}}}
			b.ReportAllocs()
			for b.Loop() {
				if err := ch.Publish(ctx, env); err != nil {
					b.Fatal(err)
				}
				m, err := c.Receive(ctx)
				if err != nil {
					b.Fatal(err)
				}
				_ = m.Ack()
			}
		})
	}
}

// TestReplayRefusalNamesChannel: a replay on a channel that keeps no delivered events is
// refused naming the broker's channel (here a memory channel standing in for each).
func TestReplayRefusalNamesChannel(t *testing.T) {
	sub := httptest.NewServer(http.NotFoundHandler())
	defer sub.Close()
	from := url.QueryEscape(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	anyBackend := func(context.Context, config.Broker) (channel.Channel, error) { return memory.New(), nil }
	tests := []struct {
		annotations string
		want        string
	}{
		{"", "the server's default channel (--channel) keeps no delivered events"},
		{", annotations: {sluice.dev/channel: memory}", "the memory channel keeps no delivered events"},
		{", annotations: {sluice.dev/channel: rabbitmq}", "the rabbitmq channel keeps no delivered events"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			s := newTestServer(t, nil, WithOpsGuarded(true), WithChannelOpener(anyBackend))
			doc := fmt.Sprintf(brokerDoc, tt.annotations) + triggerDoc("all", "t", sub.URL)
			if err := s.Apply(context.Background(), loadConfig(t, doc)); err != nil {
				t.Fatal(err)
			}
			rec := post(s.Handler(), "POST", "/triggers/ns/all/replay?from="+from, nil, "")
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tt.want) {
				t.Fatalf("%d %q, want 400 with %q", rec.Code, rec.Body, tt.want)
			}
		})
	}
}
