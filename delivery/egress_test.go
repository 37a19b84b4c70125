package delivery

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// listenOn starts a subscriber counting its requests on addr (host:0).
func listenOn(t *testing.T, addr string) (url string, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	hits = new(atomic.Int64)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s.URL, hits
}

// TestDenyEgress: with 127.0.0.2/32 denied, a subscriber listening on 127.0.0.2 is never
// reached: the first attempt fails without a retry (the policy allows five) and the event
// is dead-lettered with knativeerrordata naming --deny-egress and the prefix. The check is
// on the address dialed, after name resolution: with 127.0.0.0/8 and ::1 denied, a
// subscriber named "localhost" is refused too. A subscriber outside the list is delivered
// to. Dead letters are captured by a DeadLetterer (the broker's, on a durable channel),
// so that the sink's own address does not matter.
func TestDenyEgress(t *testing.T) {
	denied, deniedHits := listenOn(t, "127.0.0.2:0")
	allowed, allowedHits := listenOn(t, "127.0.0.1:0")
	port := allowed[strings.LastIndex(allowed, ":"):]
	for _, tc := range []struct {
		name   string
		deny   string
		url    string
		hits   *atomic.Int64
		prefix string // in the dead letter's reason; "": delivered
		ca     bool   // the target has CACerts: a client of its own
	}{
		{"denied address", "127.0.0.2/32", denied, deniedHits, "127.0.0.2/32", false},
		{"denied after name resolution", "127.0.0.0/8,::1/128", "http://localhost" + port + "/", allowedHits, "/", false},
		{"allowed address", "127.0.0.2/32", allowed, allowedHits, "", false},
		{"denied https with CACerts", "127.0.0.2/32", "https://127.0.0.2" + denied[strings.LastIndex(denied, ":"):], deniedHits, "127.0.0.2/32", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var deny DenyList
			if err := deny.Set(tc.deny); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var dead []*event.Event
			before := tc.hits.Load()
			q, pub := newQueue(t)
			m := NewMetrics(nil)
			ca := ""
			if tc.ca {
				ca = newTLSSubscriber(t).ca
			}
			d := NewDispatcher(q, Target{Name: "ns/t", URL: tc.url, CACerts: ca,
				Policy: Policy{Retry: 5, Delay: time.Millisecond, DeadLetterSink: "http://dls.invalid/"}},
				WithClient(NewClient(WithDenyEgress(deny))), WithMetrics(m),
				WithDeadLetterer(func(_ context.Context, e *event.Event) error {
					mu.Lock()
					dead = append(dead, e)
					mu.Unlock()
					return nil
				}))
			stop := run(t, d)
			pub(newEvent("e1"))
			sluicetest.Eventually(t, 30*time.Second, "settled", func() bool { return q.acked.Load() == 1 })
			stop()
			hits := tc.hits.Load() - before
			mu.Lock()
			defer mu.Unlock()
			if tc.prefix == "" {
				if hits != 1 || len(dead) != 0 {
					t.Fatalf("allowed subscriber: %d requests, %d dead letters; want 1, 0", hits, len(dead))
				}
				return
			}
			if hits != 0 {
				t.Errorf("the denied subscriber got %d requests", hits)
			}
			if v := value(m.retries.WithLabelValues("ns/t")); v != 0 {
				t.Errorf("retries_total = %v, want 0: a denied address is not retried", v)
			}
			if len(dead) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dead))
			}
			enc, _ := dead[0].Get(ExtErrorData)
			data, _ := base64.StdEncoding.DecodeString(enc)
			if !strings.Contains(string(data), "--deny-egress") || !strings.Contains(string(data), tc.prefix) {
				t.Errorf("knativeerrordata %q does not name --deny-egress and %s", data, tc.prefix)
			}
		})
	}
}

// TestDenyListSet: the flag's syntax.
func TestDenyListSet(t *testing.T) {
	var l DenyList
	if err := l.Set("169.254.0.0/16,fd00:ec2::254/128, 10.1.2.3"); err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != "169.254.0.0/16,fd00:ec2::254/128,10.1.2.3/32" {
		t.Errorf("String() = %q", got)
	}
	for _, a := range []string{"169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "10.1.2.3"} {
		if _, ok := l.denied(netip.MustParseAddr(a)); !ok {
			t.Errorf("%s not denied", a)
		}
	}
	if _, ok := l.denied(netip.MustParseAddr("10.1.2.4")); ok {
		t.Errorf("10.1.2.4 denied")
	}
	if err := l.control("tcp", "[fe80::1%eth0]:80", nil); err != nil {
		t.Errorf("fe80::1%%eth0: %v", err)
	}
	if err := l.control("tcp", "169.254.169.254:80", nil); !errors.Is(err, ErrEgressDenied) || !strings.Contains(err.Error(), "169.254.0.0/16") {
		t.Errorf("169.254.169.254: %v, want ErrEgressDenied naming the prefix", err)
	}
	for _, tt := range []struct{ value, why string }{
		{"not-a-cidr", "unable to parse IP"},
		{"10.0.0.0/99", "prefix length out of range"},
		{"fe80::1%eth0", `zone "eth0" not allowed`},
	} {
		err := l.Set(tt.value)
		if err == nil || !strings.Contains(err.Error(), `"`+tt.value+`": want a CIDR prefix`) || !strings.Contains(err.Error(), tt.why) || errors.Unwrap(err) == nil {
			t.Errorf("Set(%q) = %v, want an error naming the value and wrapping why (%s)", tt.value, err, tt.why)
		}
	}
}
