package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// jwksServer serves a JWKS (swappable) and counts the fetches.
type jwksServer struct {
	srv     *httptest.Server
	jwks    atomic.Pointer[[]byte]
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T, tlsOn bool, jwks []byte) *jwksServer {
	s := &jwksServer{}
	s.jwks.Store(&jwks)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(*s.jwks.Load())
	})
	if tlsOn {
		s.srv = httptest.NewTLSServer(h)
	} else {
		s.srv = httptest.NewServer(h)
	}
	t.Cleanup(s.srv.Close)
	return s
}

// signedWithNewKey returns a token of issuer iss signed by a fresh key named kid, and
// that key's JWKS.
func signedWithNewKey(t *testing.T, iss, kid string) (string, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	raw, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: iss, Subject: "s", Audience: []string{"a"},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}}})
	return raw, jwks
}

func randomKid(t *testing.T) string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestRemoteJWKSRefetchBounded: tokens naming keys the issuer's set lacks make Sluice
// fetch the set again at most once per MinRefetch, however many come; a rotated key is
// still picked up once that time has passed.
func TestRemoteJWKSRefetchBounded(t *testing.T) {
	is := newIssuer(t)
	s := newJWKSServer(t, true, is.jwks)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := NewVerifier(ctx, is.url, KeySource{JWKSURL: s.srv.URL, Client: s.srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	v.now = func() time.Time { return clock }
	if _, err := v.verify(ctx, is.token(t, "s", []string{"a"}, time.Hour)); err != nil {
		t.Fatalf("a token of the served key: %v", err)
	}
	const n = 200
	for range n {
		tok, _ := signedWithNewKey(t, is.url, randomKid(t))
		if _, err := v.verify(ctx, tok); err == nil {
			t.Fatal("a token of an unknown key verified")
		}
	}
	if got := s.fetches.Load(); got > 2 {
		t.Fatalf("%d tokens of unknown keys made %d fetches of the key set, want at most 2", n, got)
	}
	// The issuer rotates its key: once MinRefetch has passed, its tokens verify.
	tok, jwks := signedWithNewKey(t, is.url, "k2")
	s.jwks.Store(&jwks)
	before := s.fetches.Load()
	clock = clock.Add(MinRefetch + time.Second)
	if _, err := v.verify(ctx, tok); err != nil {
		t.Fatalf("a token of the rotated key after %v: %v", MinRefetch, err)
	}
	if got := s.fetches.Load() - before; got != 1 {
		t.Errorf("the rotation took %d fetches, want 1", got)
	}
}

// TestJWKSRequiresHTTPS: a plain-HTTP JWKS URL or issuer (discovery) is refused,
// naming --oidc-allow-http, unless it is given.
func TestJWKSRequiresHTTPS(t *testing.T) {
	is := newIssuer(t)
	plain := newJWKSServer(t, false, is.jwks)
	for _, tc := range []struct {
		name   string
		issuer string
		keys   KeySource
		err    string // fragment; "" for none
	}{
		{"http JWKS", is.url, KeySource{JWKSURL: plain.srv.URL}, "--oidc-jwks-url " + plain.srv.URL + ": plain HTTP lets anyone on the path substitute the issuer's keys; use https, or give --oidc-allow-http"},
		{"http discovery", plain.srv.URL, KeySource{}, "--oidc-issuer (discovery) " + plain.srv.URL + ": plain HTTP"},
		{"not a URL", is.url, KeySource{JWKSURL: "keys.json"}, `--oidc-jwks-url "keys.json": want an absolute https URL`},
		{"http JWKS allowed", is.url, KeySource{JWKSURL: plain.srv.URL, AllowHTTP: true}, ""},
		{"https JWKS", is.url, KeySource{JWKSURL: is.url + "/keys", Client: is.client}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			v, err := NewVerifier(ctx, tc.issuer, tc.keys)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("NewVerifier: %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.verify(ctx, is.token(t, "s", []string{"a"}, time.Hour)); err != nil {
				t.Errorf("verify: %v", err)
			}
		})
	}
}

// TestInternalIdentity: a token of this process's Internal proves its object's Knative
// subject, which the default mode and EventPolicies then judge like any sender's; a
// token of another process (another key), or one altered, is refused with 401.
func TestInternalIdentity(t *testing.T) {
	in, err := NewInternal()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewInternal()
	cfg := loadConfig(t, manifests)
	a, err := New(WithClientCertificates(), WithInternal(in), WithDefaultMode(AllowSameNamespace))
	if err != nil {
		t.Fatal(err)
	}
	a.Apply(cfg)
	sub, good := in.Sender("Trigger", "shop", "t1")
	if sub != "system:serviceaccount:shop:t1-oidc-eventing.knative.dev-trigger" {
		t.Errorf("Sender: subject %q", sub)
	}
	_, ping := in.Sender("PingSource", "other", "ticker")
	_, foreign := other.Sender("Trigger", "shop", "t1")
	_, elsewhere := in.Sender("Trigger", "elsewhere", "t1")
	forged := strings.Replace(good, "sluice.", "sluice.c3lzdGVtOnNlcnZpY2VhY2NvdW50OnNob3A6eA", 1)
	for _, tc := range []struct {
		name, key, authz string
		status           int
		reason           string
	}{
		{"same namespace", "shop/open", good, 0, ""},
		{"other namespace", "shop/open", elsewhere, 403, "allow-same-namespace"},
		{"policy names the PingSource", "shop/orders", ping, 0, ""},
		{"policy does not name the trigger", "shop/orders", good, 403, "no EventPolicy for it lets this subject in"},
		{"another process's token", "shop/open", foreign, 401, "internal token does not verify"},
		{"forged", "shop/open", forged, 401, "internal token does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/"+tc.key, nil)
			r.Header.Set("Authorization", tc.authz)
			d := a.Authorize(r, tc.key)
			if d.Status != tc.status || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("Authorize: %d %q, want %d with %q", d.Status, d.Reason, tc.status, tc.reason)
			}
			if strings.Contains(d.Reason, "sluice.") {
				t.Errorf("the reason holds the token: %q", d.Reason)
			}
		})
	}
	if d := a.AuthorizeSender(sub, "shop/open"); d.Status != 0 {
		t.Errorf("AuthorizeSender same namespace: %+v", d)
	}
	if d := a.AuthorizeSender(sub, "shop/orders"); d.Status != http.StatusForbidden {
		t.Errorf("AuthorizeSender, a policy that does not name it: %+v", d)
	}
}

// TestRemoteJWKSHungFetchHonoursCtx: while the issuer's key server hangs, a
// verification of a token naming an unknown key returns its ctx's error once ctx
// ends, whether it started the fetch or waits for another's.
func TestRemoteJWKSHungFetchHonoursCtx(t *testing.T) {
	is := newIssuer(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	life, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	k := newRemoteKeys(life, srv.URL, srv.Client(), time.Now)

	// The first starts the fetch; the second finds it under way and waits for it.
	for _, name := range []string{"starts the fetch", "waits for the fetch"} {
		t.Run(name, func(t *testing.T) {
			tok, _ := signedWithNewKey(t, is.url, randomKid(t))
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := k.VerifySignature(ctx, tok)
				errc <- err
			}()
			time.Sleep(10 * time.Millisecond) // lets it reach the fetch; the verdict does not depend on it
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("got %v, want ctx's error %v", err, context.Canceled)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a verification whose ctx ended still waits for the hung key server")
			}
		})
	}
}

// TestRemoteJWKSDefaultClientTimesOut: with no client given, key fetches time out.
func TestRemoteJWKSDefaultClientTimesOut(t *testing.T) {
	k := newRemoteKeys(context.Background(), "https://issuer.invalid/keys", nil, time.Now)
	if k.client.Timeout != FetchTimeout {
		t.Fatalf("default client timeout %v, want %v", k.client.Timeout, FetchTimeout)
	}
}
