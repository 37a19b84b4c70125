package auth

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-broker/sluice/config"
)

// TestInvalidPolicyFailsClosed: an EventPolicy that is not ready denies every sender to
// what it names, even with the default mode allow-all: its spec.to when that was read,
// its whole namespace when spec.to is at fault. Another valid policy still lets in whom
// it names; a target no policy names keeps the default mode.
func TestInvalidPolicyFailsClosed(t *testing.T) {
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte(`
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: open, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: d, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: x, namespace: lab}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: z, namespace: lab}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: bad-from, namespace: shop}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: b}}]
  from: [{sub: "ali*ce"}]
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: good, namespace: shop}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: d}}]
  from: [{sub: alice}]
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: bad-filter, namespace: shop}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: d}}]
  from: [{sub: bob}]
  filters: [{cesql: "type IN ("}]
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: bad-to, namespace: lab}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Brokr, name: x}}]
  from: [{sub: alice}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Read([]string{f})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(WithClientCertificates(), WithDefaultMode(AllowAll))
	if err != nil {
		t.Fatal(err)
	}
	a.Apply(cfg)
	for _, tt := range []struct {
		key, cn string
		status  int
		reason  string
	}{
		{"shop/b", "alice", 403, "EventPolicy shop/bad-from applies to it and is invalid"},
		{"shop/b", "anyone", 403, "is invalid: it lets no one in"},
		{"shop/open", "anyone", 0, ""}, // named by no policy: allow-all
		{"shop/d", "alice", 0, ""},     // the valid policy lets alice in
		{"shop/d", "bob", 403, "EventPolicy shop/bad-filter applies to it and is invalid"},
		{"lab/x", "alice", 403, "EventPolicy lab/bad-to"},
		{"lab/z", "alice", 403, "EventPolicy lab/bad-to"}, // spec.to at fault: the whole namespace
	} {
		c := &x509.Certificate{}
		c.Subject.CommonName = tt.cn
		r := httptest.NewRequest(http.MethodPost, "/"+tt.key, nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
		if d := a.Authorize(r, tt.key); d.Status != tt.status || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s as %s: %d %q; want %d with %q", tt.key, tt.cn, d.Status, d.Reason, tt.status, tt.reason)
		}
	}
}
