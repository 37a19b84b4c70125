package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInvalidEventPolicyFailsClosed runs sluice serve with client certificates and
// --auth-default allow-all. An EventPolicy that is invalid at start denies every sender
// to the broker it names (403 naming it) while another broker keeps allow-all; fixed on
// reload, it governs as written; broken again on reload, its last good version still
// lets in whom it let in and the broken version denies what it newly names.
func TestInvalidEventPolicyFailsClosed(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "server-ca"), newTestCA(t, "client-ca")
	certPEM, keyPEM, _ := serverCA.issue(t, "")
	certFile, keyFile, clientCAFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.pem")
	writeAtomic(t, certFile, certPEM)
	writeAtomic(t, keyFile, keyPEM)
	writeAtomic(t, clientCAFile, clientCA.pem)
	client := func(cn string) *httpsClientT {
		c, k, _ := clientCA.issue(t, cn)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return &httpsClientT{cn: cn, c: httpsClient(serverCA.pool(), pair)}
	}
	alice, bob := client("alice"), client("bob")

	cfgDir := filepath.Join(dir, "config")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(cfgDir, "brokers.yaml"), []byte(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: guarded, namespace: shop}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: open, namespace: shop}
`))
	policy := func(target, from string) []byte {
		return []byte(fmt.Sprintf(`apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: writers, namespace: shop}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: %s}}]
  from: [{sub: %q}]
`, target, from))
	}
	policyFile := filepath.Join(cfgDir, "policy.yaml")
	writeAtomic(t, policyFile, policy("guarded", "ali*ce")) // a wildcard not at the end: invalid

	s := startTLSSluice(t, alice.c, "--config", cfgDir, "--reload-interval", "50ms",
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCAFile, "--auth-default", "allow-all")
	type check struct {
		who    *httpsClientT
		broker string
		status int
		reason string
	}
	n := 0
	// expect polls until every check holds (a reload takes a tick or two), bounded.
	expect := func(step string, checks ...check) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var failed []string
			for _, c := range checks {
				n++
				st, body, _ := post(t, c.who.c, s.base+"/shop/"+c.broker, fmt.Sprint(n), "x", "")
				if st != c.status || !strings.Contains(body, c.reason) {
					failed = append(failed, fmt.Sprintf("%s to %s: %d %q, want %d with %q", c.who.cn, c.broker, st, strings.TrimSpace(body), c.status, c.reason))
				}
			}
			if len(failed) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s:\n%s", step, strings.Join(failed, "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	expect("invalid at start",
		check{alice, "guarded", 403, "EventPolicy shop/writers applies to it and is invalid"},
		check{bob, "guarded", 403, "is invalid: it lets no one in"},
		check{bob, "open", 202, ""})

	writeAtomic(t, policyFile, policy("guarded", "alice"))
	expect("fixed on reload",
		check{alice, "guarded", 202, ""},
		check{bob, "guarded", 403, "no EventPolicy for it lets this subject in"},
		check{bob, "open", 202, ""})

	writeAtomic(t, policyFile, policy("open", "bo*b"))
	expect("broken again on reload",
		check{alice, "guarded", 202, ""}, // the last good version
		check{bob, "guarded", 403, "no EventPolicy for it lets this subject in"},
		check{bob, "open", 403, "EventPolicy shop/writers applies to it and is invalid"})
	if !strings.Contains(s.logs.String(), "lets no one in") {
		t.Errorf("the invalid policy is not logged as letting no one in:\n%s", s.logs)
	}
}

// httpsClientT is a client presenting a certificate with the common name cn.
type httpsClientT struct {
	cn string
	c  *http.Client
}

// TestEmptiedConfigKeepsBrokers: an editor that saves in place empties the file first.
// While the file is empty sluice serve keeps its brokers (events are accepted, not 404)
// and logs why; once the file holds objects again, they apply.
func TestEmptiedConfigKeepsBrokers(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	broker := func(name string) []byte {
		return []byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: " + name + ", namespace: shop}\n")
	}
	writeAtomic(t, cfg, broker("orders"))
	b := startBroker(t, "--config", cfg, "--reload-interval", "20ms")
	// poll posts until the broker at path answers want, bounded.
	poll := func(path string, want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; ; i++ {
			st, body := postBinary(t, b.base+path, ceHeaders(fmt.Sprint(path, i), "x"), []byte("{}"))
			if st == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("POST %s: %d %q, want %d", path, st, body, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	poll("/shop/orders", 202)

	if err := os.Truncate(cfg, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.logs.String(), "its file is empty, taken for a write in progress") {
		if time.Now().After(deadline) {
			t.Fatalf("the empty file is not logged:\n%s", b.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 20 { // the empty file has been read: the broker is still there
		if st, body := postBinary(t, b.base+"/shop/orders", ceHeaders(fmt.Sprint("empty", i), "x"), []byte("{}")); st != 202 {
			t.Fatalf("POST while the file is empty: %d %q, want 202", st, body)
		}
	}

	writeAtomic(t, cfg, broker("payments"))
	poll("/shop/payments", 202)
	poll("/shop/orders", 404)
}
