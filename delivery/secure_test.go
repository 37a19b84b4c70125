package delivery

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// tokens is a TokenSource of fixed tokens.
type tokens map[string]string

func (ts tokens) Token(_ context.Context, aud string) (string, error) {
	if t, ok := ts[aud]; ok {
		return t, nil
	}
	return "", errors.New("no token for " + aud)
}

// tlsSubscriber is an https subscriber offering HTTP/2, with a certificate of its own
// CA; it records each request's protocol and Authorization header.
type tlsSubscriber struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // "proto authorization"
	ca   string   // PEM of its certificate (self-signed: its own CA)
}

func newTLSSubscriber(t *testing.T) *tlsSubscriber {
	s := &tlsSubscriber{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Proto+" "+r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	s.ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
	return s
}

func (s *tlsSubscriber) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// TestHTTPSSubscriberWithCACerts: an https subscriber whose certificate only the
// Destination's CACerts trust gets its events over HTTP/2, with the token of its
// audience; the same subscriber without CACerts fails verification and the event goes
// to the dead-letter sink (also https, with its own CACerts and audience).
func TestHTTPSSubscriberWithCACerts(t *testing.T) {
	sub, dls := newTLSSubscriber(t), newTLSSubscriber(t)
	q, pub := newQueue(t)
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, CACerts: sub.ca, Audience: "aud-sub"},
		WithClient(NewClient()), WithTokenSource(tokens{"aud-sub": "tok-sub", "aud-dls": "tok-dls"}))
	stop := run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "delivered", func() bool { return q.acked.Load() == 1 })
	stop()
	if got := sub.requests(); len(got) != 1 || got[0] != "HTTP/2.0 Bearer tok-sub" {
		t.Errorf("subscriber saw %q; want one HTTP/2.0 request with Bearer tok-sub", got)
	}

	// No CACerts: the system's pool does not know the subscriber's CA.
	q2, pub2 := newQueue(t)
	d2 := NewDispatcher(q2, Target{Name: "ns/t2", URL: sub.URL,
		Policy:            Policy{Retry: 0, DeadLetterSink: dls.URL},
		DeadLetterCACerts: dls.ca, DeadLetterAudience: "aud-dls"}, WithClient(NewClient()))
	d2.tokens = tokens{"aud-dls": "tok-dls"}
	stop2 := run(t, d2)
	pub2(newEvent("e2"))
	sluicetest.Eventually(t, 5*time.Second, "dead-lettered", func() bool { return q2.acked.Load() == 1 })
	stop2()
	if got := sub.requests(); len(got) != 1 {
		t.Errorf("the subscriber was reached without its CACerts: %q", got)
	}
	if got := dls.requests(); len(got) != 1 || got[0] != "HTTP/2.0 Bearer tok-dls" {
		t.Errorf("dead-letter sink saw %q; want one HTTP/2.0 request with Bearer tok-dls", got)
	}
}

// fileTokens is a TokenSource whose every token is missing, with an error naming the file,
// as auth.TokenFiles's does.
type fileTokens struct{}

func (fileTokens) Token(_ context.Context, aud string) (string, error) {
	return "", errors.New("token for audience " + aud + ": open /etc/sluice/tokens/" + aud + ": permission denied")
}

// TestMissingTokenDeadLetterNamesOnlyTheAudience: a delivery that fails for want of a
// token is dead-lettered saying which audience has none; the token source's error, which
// names a file, goes to the log, once for the two attempts.
func TestMissingTokenDeadLetterNamesOnlyTheAudience(t *testing.T) {
	sub := newServer(t, nil)
	dls := newServer(t, nil)
	q, pub := newQueue(t)
	var logs strings.Builder
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, Audience: "shop",
		Policy: Policy{Retry: 1, Delay: time.Millisecond, DeadLetterSink: dls.URL}},
		WithLogger(testLogger(&logs)), WithTokenSource(fileTokens{}))
	run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "dead-lettered", func() bool { return q.acked.Load() == 1 })
	if n := sub.n.Load(); n != 0 {
		t.Errorf("subscriber reached %d times without a token", n)
	}
	got := dls.received()
	if len(got) != 1 {
		t.Fatalf("dead letters %d, want 1", len(got))
	}
	enc, _ := got[0].ev.Get(ExtErrorData)
	if data, err := base64.StdEncoding.DecodeString(enc); err != nil || string(data) != `no token for audience "shop"` {
		t.Errorf("%s = %q (%v), want only the audience", ExtErrorData, data, err)
	}
	if n := strings.Count(logs.String(), "/etc/sluice/tokens/shop"); n != 1 {
		t.Errorf("the source's error is logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestAudienceWithoutToken: a token source without a token for the audience fails the
// delivery, saying so; without a token source the audience is ignored (no token sent),
// as Knative does with OIDC off.
func TestAudienceWithoutToken(t *testing.T) {
	sub := newTLSSubscriber(t)
	q, pub := newQueue(t)
	var logs strings.Builder
	d := NewDispatcher(q, Target{Name: "ns/t", URL: sub.URL, CACerts: sub.ca, Audience: "nobody", Policy: Policy{Retry: 0}},
		WithLogger(testLogger(&logs)), WithTokenSource(tokens{"other": "tok"}))
	stop := run(t, d)
	pub(newEvent("e1"))
	sluicetest.Eventually(t, 5*time.Second, "settled", func() bool { return q.acked.Load() == 1 })
	stop()
	if got := sub.requests(); len(got) != 0 {
		t.Errorf("subscriber reached without the token of its audience: %q", got)
	}
	if !strings.Contains(logs.String(), "no token for nobody") {
		t.Errorf("the log does not say the token is missing:\n%s", logs.String())
	}

	q2, pub2 := newQueue(t)
	d2 := NewDispatcher(q2, Target{Name: "ns/t2", URL: sub.URL, CACerts: sub.ca, Audience: "nobody"})
	stop2 := run(t, d2)
	pub2(newEvent("e2"))
	sluicetest.Eventually(t, 5*time.Second, "delivered", func() bool { return q2.acked.Load() == 1 })
	stop2()
	if got := sub.requests(); len(got) != 1 || got[0] != "HTTP/2.0 " {
		t.Errorf("without a token source: subscriber saw %q; want one request without a token", got)
	}
}

func TestBadCACertsRefused(t *testing.T) {
	if _, err := resolve(Target{Name: "x", URL: "https://a/", CACerts: "not pem"}, nil); err == nil || !strings.Contains(err.Error(), "CACerts") {
		t.Errorf("resolve with bad CACerts: %v", err)
	}
}
