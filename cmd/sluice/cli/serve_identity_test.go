package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// TestServeInternalIdentity runs serve with sender identity on (--oidc-issuer, Knative's
// default mode allow-same-namespace) and checks Sluice's own sends to its own ingress
// carry the sending object's identity:
//   - a trigger whose subscriber is another broker of the same Sluice forwards to it;
//   - a trigger whose subscriber is a Sequence posts to the Sequence's first channel, and
//     the first step's reply reaches the second channel (a reply URL of its own);
//   - replies ingested into a broker pass its EventPolicy with the trigger's identity:
//     a policy that names the trigger lets its reply in, one that does not refuses it.
func TestServeInternalIdentity(t *testing.T) {
	const iss = "https://issuer.test"
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o644); err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	token := func(aud string) string {
		raw, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: iss, Subject: "system:serviceaccount:shop:app", Audience: []string{aud},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	var mu sync.Mutex
	got := map[string][]string{} // sink path → event types
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("Ce-Type"))
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/replier") { // answer with a reply event
			w.Header().Set("Ce-Specversion", "1.0")
			w.Header().Set("Ce-Id", "r-"+r.Header.Get("Ce-Id"))
			w.Header().Set("Ce-Source", "/replier")
			w.Header().Set("Ce-Type", r.Header.Get("Ce-Type")+".reply")
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()
	received := func(path string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got[path]...)
	}

	s := startServe(t, fmt.Sprintf(`
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: a, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: guarded, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: closed, namespace: shop}
---
# a forwards "fwd" to broker b, whose trigger hands it to the sink.
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: to-b, namespace: shop}
spec:
  broker: a
  filter: {attributes: {type: fwd}}
  subscriber: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: b-out, namespace: shop}
spec:
  broker: b
  subscriber: {uri: %[1]q}
---
# a hands "seq" to a Sequence of two replying steps, whose reply goes to the sink.
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: to-seq, namespace: shop}
spec:
  broker: a
  filter: {attributes: {type: seq}}
  subscriber: {ref: {apiVersion: flows.knative.dev/v1, kind: Sequence, name: seq}}
---
apiVersion: flows.knative.dev/v1
kind: Sequence
metadata: {name: seq, namespace: shop}
spec:
  steps:
    - uri: %[2]q
    - uri: %[3]q
  reply: {uri: %[4]q}
---
# In guarded and closed, a trigger replies to "ask"; the reply goes to the sink.
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: asker, namespace: shop}
spec:
  broker: guarded
  filter: {attributes: {type: ask}}
  subscriber: {uri: %[5]q}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: answers, namespace: shop}
spec:
  broker: guarded
  filter: {attributes: {type: ask.reply}}
  subscriber: {uri: %[6]q}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: asker-closed, namespace: shop}
spec:
  broker: closed
  filter: {attributes: {type: ask}}
  subscriber: {uri: %[5]q}
  delivery: {retry: 0}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: answers-closed, namespace: shop}
spec:
  broker: closed
  filter: {attributes: {type: ask.reply}}
  subscriber: {uri: %[7]q}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: guarded, namespace: shop}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: guarded}}]
  from:
    - sub: system:serviceaccount:shop:app
    - ref: {apiVersion: eventing.knative.dev/v1, kind: Trigger, name: asker, namespace: shop}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: closed, namespace: shop}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: closed}}]
  from: [{sub: system:serviceaccount:shop:app}]
`, sink.URL+"/from-b", sink.URL+"/replier-1", sink.URL+"/replier-2", sink.URL+"/seq-out",
		sink.URL+"/replier-ask", sink.URL+"/answers", sink.URL+"/answers-closed"),
		"--oidc-issuer", iss, "--oidc-jwks-file", jwksFile)
	if err := sluicetest.WaitReady(s.base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	post := func(broker, typ string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.base+"/shop/"+broker, strings.NewReader("{}"))
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", typ+"-1")
		req.Header.Set("Ce-Source", "/test")
		req.Header.Set("Ce-Type", typ)
		req.Header.Set("Authorization", "Bearer "+token("eventing.knative.dev/broker/shop/"+broker))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %s: %s %s", broker, resp.Status, body)
		}
	}
	post("a", "fwd")
	post("a", "seq")
	post("guarded", "ask")
	post("closed", "ask")
	sluicetest.Eventually(t, 30*time.Second, "the forwarded event, the Sequence's reply and the allowed reply at the sink", func() bool {
		return len(received("/from-b")) == 1 && len(received("/seq-out")) == 1 && len(received("/answers")) == 1
	})
	if got := received("/seq-out"); got[0] != "seq.reply.reply" {
		t.Errorf("the Sequence's reply has type %q, want seq.reply.reply (both steps replied)", got[0])
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.log.String(), "reply refused") {
		if time.Now().After(deadline) {
			t.Fatalf("no refused reply in the log in 30s:\n%s", s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := received("/answers-closed"); len(got) != 0 {
		t.Errorf("a reply the broker's EventPolicy does not let in was delivered: %v", got)
	}
	want := "system:serviceaccount:shop:asker-closed-oidc-eventing.knative.dev-trigger may not send to /shop/closed"
	if !strings.Contains(s.log.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, s.log.String())
	}
	// An internal token is "sluice.<subject>.<43-character MAC>"; sluice.dev/... names
	// are not.
	if strings.Contains(s.log.String(), "Bearer sluice.") || internalTokenRE.MatchString(s.log.String()) {
		t.Errorf("the log shows an internal token:\n%s", s.log.String())
	}
}

// internalTokenRE matches an internal token (auth's "sluice.<subject>.<HMAC>").
var internalTokenRE = regexp.MustCompile(`sluice\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}`)
