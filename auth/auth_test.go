package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
)

// issuer is a token issuer for tests: an ECDSA key whose JWKS an HTTPS server serves.
type issuer struct {
	url    string // the issuer and the JWKS server's base URL
	key    *ecdsa.PrivateKey
	signer jose.Signer
	client *http.Client // trusts the JWKS server
	jwks   []byte
}

func newIssuer(t testing.TB) *issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jwks)
	}))
	t.Cleanup(srv.Close)
	return &issuer{url: srv.URL, key: key, signer: signer, client: srv.Client(), jwks: jwks}
}

func (is *issuer) token(t testing.TB, sub string, aud []string, exp time.Duration) string {
	t.Helper()
	now := time.Now()
	raw, err := jwt.Signed(is.signer).Claims(jwt.Claims{Issuer: is.url, Subject: sub, Audience: aud,
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(exp))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// loadConfig reads Knative manifests from yaml.
func loadConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const manifests = `
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: orders, namespace: shop, labels: {app: special-app}}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: open, namespace: shop}
---
apiVersion: messaging.knative.dev/v1
kind: InMemoryChannel
metadata: {name: ch, namespace: shop}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: orders-policy, namespace: shop}
spec:
  to:
    - selector: {apiVersion: eventing.knative.dev/v1, kind: Broker, matchLabels: {app: special-app}}
  from:
    - ref: {apiVersion: sources.knative.dev/v1, kind: PingSource, name: ticker, namespace: other}
    - sub: system:serviceaccount:shop:trusted-app
    - sub: "system:serviceaccount:shop:other-*"
  filters:
    - cesql: "type IN ('order.created', 'order.updated')"
    - exact: {type: com.github.push}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: channel-policy, namespace: shop}
spec:
  to:
    - ref: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: ch}
  from:
    - sub: alice
`

func TestAuthorize(t *testing.T) {
	is := newIssuer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := NewVerifier(ctx, is.url, KeySource{JWKSURL: is.url + "/keys", Client: is.client})
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, manifests)
	other := newIssuer(t) // a second issuer whose tokens must not verify
	orders, open, ch := "eventing.knative.dev/broker/shop/orders", "eventing.knative.dev/broker/shop/open", "messaging.knative.dev/inmemorychannel/shop/ch"
	clientCert := func(cn string) *tls.ConnectionState {
		c := &x509.Certificate{}
		c.Subject.CommonName = cn
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
	}
	type req struct {
		key   string
		authz string // Authorization header
		tls   *tls.ConnectionState
	}
	bearer := func(tok string) string { return "Bearer " + tok }
	tests := []struct {
		name    string
		mode    Mode
		r       req
		status  int
		reason  string // fragment
		filters bool   // the decision carries the policy's filters
	}{
		{"no token", AllowAll, req{key: "shop/open"}, 401, "missing Authorization: Bearer token", false},
		{"not bearer", AllowAll, req{key: "shop/open", authz: "Basic YTpi"}, 401, "not a Bearer token", false},
		{"garbage token", AllowAll, req{key: "shop/open", authz: bearer("abc.def.ghi")}, 401, "does not verify", false},
		{"other issuer's key", AllowAll, req{key: "shop/open", authz: bearer(other.token(t, "system:serviceaccount:shop:a", []string{open}, time.Hour))}, 401, "does not verify", false},
		{"expired", AllowAll, req{key: "shop/open", authz: bearer(is.token(t, "system:serviceaccount:shop:a", []string{open}, -time.Minute))}, 401, "expired", false},
		{"wrong audience", AllowAll, req{key: "shop/open", authz: bearer(is.token(t, "system:serviceaccount:shop:a", []string{orders}, time.Hour))}, 401, `does not include "eventing.knative.dev/broker/shop/open"`, false},
		{"allow-all", AllowAll, req{key: "shop/open", authz: bearer(is.token(t, "system:serviceaccount:elsewhere:a", []string{open}, time.Hour))}, 0, "", false},
		{"same namespace: in", AllowSameNamespace, req{key: "shop/open", authz: bearer(is.token(t, "system:serviceaccount:shop:a", []string{open}, time.Hour))}, 0, "", false},
		{"same namespace: out", AllowSameNamespace, req{key: "shop/open", authz: bearer(is.token(t, "system:serviceaccount:shopping:a", []string{open}, time.Hour))}, 403, "allow-same-namespace", false},
		{"deny-all", DenyAll, req{key: "shop/open", authz: bearer(is.token(t, "system:serviceaccount:shop:a", []string{open}, time.Hour))}, 403, "deny-all", false},
		// Policies replace the default mode, even allow-all.
		{"policy: exact sub", AllowAll, req{key: "shop/orders", authz: bearer(is.token(t, "system:serviceaccount:shop:trusted-app", []string{orders}, time.Hour))}, 0, "", true},
		{"policy: wildcard sub", AllowAll, req{key: "shop/orders", authz: bearer(is.token(t, "system:serviceaccount:shop:other-x", []string{orders}, time.Hour))}, 0, "", true},
		{"policy: ref resolved", AllowAll, req{key: "shop/orders", authz: bearer(is.token(t, "system:serviceaccount:other:ticker-oidc-sources.knative.dev-pingsource", []string{orders}, time.Hour))}, 0, "", true},
		{"policy: not listed", AllowAll, req{key: "shop/orders", authz: bearer(is.token(t, "system:serviceaccount:shop:trusted-app2", []string{orders}, time.Hour))}, 403, "no EventPolicy for it lets this subject in", false},
		{"policy: prefix is not a wildcard", AllowAll, req{key: "shop/orders", authz: bearer(is.token(t, "system:serviceaccount:shop:other", []string{orders}, time.Hour))}, 403, "may not send", false},
		// A channel's audience; a client certificate's CN as the identity.
		{"channel token", DenyAll, req{key: "shop/ch", authz: bearer(is.token(t, "alice", []string{ch}, time.Hour))}, 0, "", false},
		{"channel client cert", DenyAll, req{key: "shop/ch", tls: clientCert("alice")}, 0, "", false},
		{"channel client cert: other", DenyAll, req{key: "shop/ch", tls: clientCert("bob")}, 403, "bob may not send", false},
		{"unknown target", AllowAll, req{key: "shop/nope"}, 403, "no broker or channel", false},
	}
	for _, tt := range tests {
		a, err := New(WithVerifier(v), WithClientCertificates(), WithDefaultMode(tt.mode))
		if err != nil {
			t.Fatal(err)
		}
		a.Apply(cfg)
		r := httptest.NewRequest(http.MethodPost, "/"+tt.r.key, nil)
		if tt.r.authz != "" {
			r.Header.Set("Authorization", tt.r.authz)
		}
		r.TLS = tt.r.tls
		d := a.Authorize(r, tt.r.key)
		if d.Status != tt.status || !strings.Contains(d.Reason, tt.reason) || (len(d.Filters) > 0) != tt.filters {
			t.Errorf("%s: status %d reason %q filters %d; want %d with %q, filters %v", tt.name, d.Status, d.Reason, len(d.Filters), tt.status, tt.reason, tt.filters)
		}
		if strings.Contains(d.Reason, "eyJ") {
			t.Errorf("%s: the reason holds a token: %q", tt.name, d.Reason)
		}
	}
}

// TestPolicyFilters: an event passes the orders policy when it matches at least one of
// its filters (the cesql or the exact), as Knative documents.
func TestPolicyFilters(t *testing.T) {
	cfg := loadConfig(t, manifests)
	var p *config.EventPolicy
	for i := range cfg.EventPolicies {
		if cfg.EventPolicies[i].Name == "orders-policy" {
			p = &cfg.EventPolicies[i]
		}
	}
	if p == nil {
		t.Fatalf("no orders-policy in %+v", cfg.EventPolicies)
	}
	for typ, want := range map[string]bool{"order.created": true, "order.updated": true, "com.github.push": true, "order.deleted": false} {
		e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: typ}
		if got := p.Filter.Match(e); got != want {
			t.Errorf("type %s: Match %v, want %v", typ, got, want)
		}
	}
}

func TestJWKSFileAndTokenCache(t *testing.T) {
	is := newIssuer(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, is.jwks, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(context.Background(), is.url, KeySource{JWKSFile: file})
	if err != nil {
		t.Fatal(err)
	}
	tok := is.token(t, "s", []string{"a"}, time.Hour)
	c, err := v.verify(context.Background(), tok)
	if err != nil || c.subject != "s" {
		t.Fatalf("verify: %+v, %v", c, err)
	}
	if _, ok := v.cache[tok]; !ok {
		t.Error("a verified token was not remembered")
	}
	// Once remembered, a token that expired is checked again and refused.
	v.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := v.verify(context.Background(), tok); err == nil {
		t.Error("a remembered token was accepted after its expiry")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(); err == nil || !strings.Contains(err.Error(), "WithVerifier or WithClientCertificates") {
		t.Errorf("New(): %v", err)
	}
	if _, err := New(WithClientCertificates(), WithDefaultMode("allow-some")); err == nil || !strings.Contains(err.Error(), "WithDefaultMode") {
		t.Errorf("bad mode: %v", err)
	}
	if _, err := NewVerifier(context.Background(), "https://x", KeySource{JWKSURL: "https://x/k", JWKSFile: "f"}); err == nil {
		t.Error("both a JWKS URL and file: no error")
	}
}

func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tok")
	if err := os.WriteFile(f, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, err := NewTokenFiles([]string{"aud-1=" + f})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := tf.Token(context.Background(), "aud-1"); err != nil || tok != "tok-1" {
		t.Errorf("Token: %q, %v", tok, err)
	}
	if _, err := tf.Token(context.Background(), "aud-2"); err == nil || !strings.Contains(err.Error(), `no token for audience "aud-2"`) {
		t.Errorf("unknown audience: %v", err)
	}
	// A refreshed file is read again (after the 1 s check interval).
	os.WriteFile(f, []byte("tok-2"), 0o600)
	os.Chtimes(f, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	time.Sleep(1100 * time.Millisecond)
	if tok, _ := tf.Token(context.Background(), "aud-1"); tok != "tok-2" {
		t.Errorf("after the file changed: %q, want tok-2", tok)
	}
	for _, bad := range []string{"nofile", "=f", "a="} {
		if _, err := NewTokenFiles([]string{bad}); err == nil {
			t.Errorf("NewTokenFiles(%q): no error", bad)
		}
	}
}
