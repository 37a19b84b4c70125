package e2e

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testCA is a certificate authority made by the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue returns a PEM certificate and key: a server certificate for 127.0.0.1 without
// cn, a client certificate with cn as its subject's common name otherwise.
func (ca *testCA) issue(t *testing.T, cn string) (certPEM, keyPEM []byte, serial *big.Int) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ = rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if cn == "" {
		tmpl.Subject.CommonName = "sluice"
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), serial
}

// writeAtomic replaces path with data as a rename, the way cert managers rotate files.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// jwksIssuer signs tokens with an ECDSA key whose JWKS it serves over HTTPS.
type jwksIssuer struct {
	srv    *httptest.Server
	signer jose.Signer
	caFile string // the HTTPS server's certificate, for --oidc-ca
}

func newJWKSIssuer(t *testing.T, dir string) *jwksIssuer {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "e2e"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "e2e", Algorithm: "ES256", Use: "sig"}}})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jwks)
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(dir, "jwks-ca.pem")
	writeAtomic(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return &jwksIssuer{srv: srv, signer: signer, caFile: caFile}
}

func (is *jwksIssuer) token(t *testing.T, sub, aud string) string {
	t.Helper()
	raw, err := jwt.Signed(is.signer).Claims(jwt.Claims{Issuer: is.srv.URL, Subject: sub, Audience: jwt.Audience{aud},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// tlsSluice is a `sluice serve` over TLS.
type tlsSluice struct {
	base string // https://127.0.0.1:PORT
	logs *syncBuffer
	cmd  *exec.Cmd
}

// startTLSSluice runs sluice serve with args (which must make it serve TLS) and waits for
// its https ingest URL and /readyz through client.
func startTLSSluice(t *testing.T, client *http.Client, args ...string) *tlsSluice {
	t.Helper()
	cmd := exec.Command(sluiceBin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsSluice{logs: &syncBuffer{}, cmd: cmd}
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "ingest: "); ok {
				select {
				case urls <- u:
				default:
				}
			}
		}
	}()
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("sluice logs:\n%s", s.logs)
		}
	})
	select {
	case u := <-urls:
		if !strings.HasPrefix(u, "https://") {
			t.Fatalf("ingest URL %q, want https", u)
		}
		rest := u[len("https://"):]
		s.base = "https://" + rest[:strings.Index(rest, "/")]
	case err := <-exited:
		t.Fatalf("sluice exited: %v\n%s", err, s.logs)
	case <-time.After(20 * time.Second):
		t.Fatalf("no ingest URL in 20s\n%s", s.logs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(s.base + "/readyz")
		if err == nil {
			discard(resp)
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready over TLS in 10s: %v\n%s", err, s.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpsClient(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func post(t *testing.T, c *http.Client, url, id, typ, bearer string) (status int, body, proto string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"n":1}`))
	for k, v := range ceHeaders(id, typ) {
		req.Header.Set(k, v)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Proto
}

// TestSecureIngress runs sluice with TLS, mutual TLS, a JWKS served over HTTPS and the
// EventPolicy of Knative's authorization docs (only pingsource-2 of namespace-2 may send
// to namespace-1/broker), and checks who gets in: allowed (token or client certificate),
// 401 (no token, bad token, wrong audience), 403 (a valid sender the policy does not
// name; a filter that refuses the event), over HTTP/2; the plain port serves probes and
// metrics only; the server certificate is rotated without a restart; and no token shows
// in the logs.
func TestSecureIngress(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := newTestCA(t, "server-ca"), newTestCA(t, "client-ca")
	certPEM, keyPEM, serial1 := serverCA.issue(t, "")
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeAtomic(t, keyFile, keyPEM)
	writeAtomic(t, certFile, certPEM)
	clientCAFile := filepath.Join(dir, "client-ca.pem")
	writeAtomic(t, clientCAFile, clientCA.pem)
	is := newJWKSIssuer(t, dir)

	sub := newSubscriber(t, nil)
	cfgDir := filepath.Join(dir, "config")
	os.Mkdir(cfgDir, 0o755)
	for _, f := range []string{"100-authz-example.yaml", "200-authz-example-policy.yaml"} {
		data, err := os.ReadFile(filepath.Join(corpusDir, "eventpolicy", f))
		if err != nil {
			t.Fatal(err)
		}
		writeAtomic(t, filepath.Join(cfgDir, f), data)
	}
	// A second broker whose policy filters events (the filters of Knative's example).
	writeAtomic(t, filepath.Join(cfgDir, "300-filtered.yaml"), []byte(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: orders, namespace: namespace-1}
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: orders-only, namespace: namespace-1}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: orders}}]
  from: [{sub: "system:serviceaccount:namespace-1:*"}]
  filters:
    - cesql: "type IN ('order.created', 'order.updated', 'order.canceled')"
    - exact: {type: com.github.push}
`))
	refs := filepath.Join(dir, "refs.yaml")
	writeAtomic(t, refs, []byte(fmt.Sprintf("- {apiVersion: serving.knative.dev/v1, kind: Service, namespace: namespace-1, name: event-display, url: %q}\n", sub.URL)))
	plainAddr := freePort(t)

	anon := httpsClient(serverCA.pool())
	s := startTLSSluice(t, anon, "--config", cfgDir, "--refs", refs,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCAFile, "--plain-addr", plainAddr,
		"--oidc-issuer", is.srv.URL, "--oidc-jwks-url", is.srv.URL+"/keys", "--oidc-ca", is.caFile,
		"--auth-default", "deny-all")
	url := s.base + "/namespace-1/broker"
	aud := "eventing.knative.dev/broker/namespace-1/broker"
	pingsource2 := "system:serviceaccount:namespace-2:pingsource-2-oidc-sources.knative.dev-pingsource"
	pingsource1 := "system:serviceaccount:namespace-1:pingsource-1-oidc-sources.knative.dev-pingsource"
	good := is.token(t, pingsource2, aud)
	forged := func() string { // the right claims, signed by another key
		other := newJWKSIssuer(t, t.TempDir())
		other.srv.URL = is.srv.URL
		return other.token(t, pingsource2, aud)
	}()

	certPEM2, keyPEM2, _ := clientCA.issue(t, pingsource2)
	allowedCert, _ := tls.X509KeyPair(certPEM2, keyPEM2)
	certPEM3, keyPEM3, _ := clientCA.issue(t, pingsource1)
	otherCert, _ := tls.X509KeyPair(certPEM3, keyPEM3)

	for _, tt := range []struct {
		name   string
		client *http.Client
		url    string
		typ    string
		bearer string
		status int
		reason string
	}{
		{"token allowed", anon, url, "dev.knative.sources.ping", good, 202, ""},
		{"client certificate allowed", httpsClient(serverCA.pool(), allowedCert), url, "dev.knative.sources.ping", "", 202, ""},
		{"no token", anon, url, "dev.knative.sources.ping", "", 401, "missing Authorization: Bearer token"},
		{"forged token", anon, url, "dev.knative.sources.ping", forged, 401, "does not verify"},
		{"wrong audience", anon, url, "dev.knative.sources.ping", is.token(t, pingsource2, "eventing.knative.dev/broker/namespace-1/orders"), 401, "audience"},
		{"same namespace, not in the policy", anon, url, "dev.knative.sources.ping", is.token(t, pingsource1, aud), 403, "no EventPolicy for it lets this subject in"},
		{"client certificate not in the policy", httpsClient(serverCA.pool(), otherCert), url, "dev.knative.sources.ping", "", 403, "may not send"},
		{"filter passes", anon, s.base + "/namespace-1/orders", "order.created", is.token(t, pingsource1, "eventing.knative.dev/broker/namespace-1/orders"), 202, ""},
		{"filter refuses", anon, s.base + "/namespace-1/orders", "order.shipped", is.token(t, pingsource1, "eventing.knative.dev/broker/namespace-1/orders"), 403, "the EventPolicy filters refuse it"},
	} {
		status, body, proto := post(t, tt.client, tt.url, tt.name, tt.typ, tt.bearer)
		if status != tt.status || !strings.Contains(body, tt.reason) {
			t.Errorf("%s: %d %q; want %d with %q", tt.name, status, body, tt.status, tt.reason)
		}
		if proto != "HTTP/2.0" {
			t.Errorf("%s: served over %s, want HTTP/2.0", tt.name, proto)
		}
		if strings.Count(strings.TrimSpace(body), "\n") > 0 {
			t.Errorf("%s: reason is not one line: %q", tt.name, body)
		}
	}
	// The two allowed events reach the subscriber.
	got := sub.waitFor(t, 2, 10*time.Second)
	ids := map[string]bool{}
	for _, r := range got {
		ids[r.Header.Get("Ce-Id")] = true
	}
	if !ids["token allowed"] || !ids["client certificate allowed"] {
		t.Errorf("subscriber got %v; want the two allowed events", ids)
	}

	// The plain port: probes and metrics, never events.
	resp, err := http.Get("http://" + plainAddr + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("plain /readyz: %v %v", resp, err)
	} else {
		discard(resp)
	}
	if st, body := postBinary(t, "http://"+plainAddr+"/namespace-1/broker", ceHeaders("plain", "x"), []byte("{}")); st != 404 {
		t.Errorf("an event over the plain port: %d %q, want 404", st, body)
	}
	resp, err = http.Get("http://" + plainAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte(`sluice_requests_rejected_total{broker="namespace-1/broker",reason="unauthenticated"} 3`)) ||
		!bytes.Contains(metrics, []byte(`sluice_requests_rejected_total{broker="namespace-1/broker",reason="forbidden"} 2`)) {
		t.Errorf("rejections not counted by reason:\n%s", grepLines(string(metrics), "requests_rejected"))
	}

	// Rotation: new handshakes get the new certificate, no restart.
	serialNow := func() *big.Int {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(s.base, "https://"), &tls.Config{RootCAs: serverCA.pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := serialNow(); got.Cmp(serial1) != 0 {
		t.Fatalf("serving serial %v, want %v", got, serial1)
	}
	certPEM4, keyPEM4, serial2 := serverCA.issue(t, "")
	writeAtomic(t, keyFile, keyPEM4)
	writeAtomic(t, certFile, certPEM4)
	deadline := time.Now().Add(10 * time.Second)
	for serialNow().Cmp(serial2) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served within 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, body, _ := post(t, httpsClient(serverCA.pool()), url, "after rotation", "dev.knative.sources.ping", good); st != 202 {
		t.Errorf("after rotation: %d %q", st, body)
	}
	if s.cmd.ProcessState != nil {
		t.Error("sluice restarted or exited during rotation")
	}

	// Tokens never reach the logs.
	for _, tok := range []string{good, forged} {
		if strings.Contains(s.logs.String(), tok) || strings.Contains(s.logs.String(), tok[strings.LastIndexByte(tok, '.')+1:]) {
			t.Error("a token is in the logs")
		}
	}
	if !strings.Contains(s.logs.String(), "request refused") {
		t.Errorf("refusals not logged:\n%s", s.logs)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestHTTPSSubscriberWithCACertsAndAudience: a Trigger's https subscriber, whose
// certificate only the Trigger's spec.subscriber.CACerts trust, receives the event over
// HTTP/2 with the token of its audience from --oidc-token.
func TestHTTPSSubscriberWithCACertsAndAudience(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "subscriber-ca")
	certPEM, keyPEM, _ := ca.issue(t, "")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ proto, authz, id string }
	got := make(chan seen, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Proto, r.Header.Get("Authorization"), r.Header.Get("Ce-Id")}
		w.WriteHeader(http.StatusAccepted)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tokenFile := filepath.Join(dir, "token")
	writeAtomic(t, tokenFile, []byte("header.payload.signature\n"))
	indented := "      " + strings.ReplaceAll(strings.TrimSpace(string(ca.pem)), "\n", "\n      ")
	cfg := writeConfig(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: default}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: secure, namespace: default}
spec:
  broker: default
  subscriber:
    uri: `+srv.URL+`/
    audience: my-subscriber
    CACerts: |
`+indented+"\n")
	b := startBroker(t, "--config", cfg, "--oidc-token", "my-subscriber="+tokenFile)
	if st, body := postBinary(t, b.base+"/default/default", ceHeaders("tls-1", "t"), []byte("{}")); st != 202 {
		t.Fatalf("post: %d %q", st, body)
	}
	select {
	case s := <-got:
		if s.proto != "HTTP/2.0" || s.authz != "Bearer header.payload.signature" || s.id != "tls-1" {
			t.Errorf("subscriber saw %+v; want HTTP/2.0 with the audience's token", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the https subscriber got nothing in 10s\n%s", b.logs)
	}
	if strings.Contains(b.logs.String(), "header.payload.signature") {
		t.Error("the token is in the logs")
	}
}

// TestSlowClientsCutOff runs sluice with a 1 s read-header timeout and a cap of 8
// connections against 20 clients that send their headers one byte a second: each is
// disconnected by the server (at most 8 at a time, so in about three rounds), nothing is
// left behind (goroutines back to where they were), and the server serves normally
// afterwards.
func TestSlowClientsCutOff(t *testing.T) {
	b := startBroker(t, "--read-header-timeout", "1s", "--max-conns", "8")
	before := b.metric("go_goroutines")
	addr := strings.TrimPrefix(b.base, "http://")
	const clients = 20
	cut := make(chan time.Duration, clients)
	start := time.Now()
	for i := 0; i < clients; i++ {
		go func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				cut <- -1
				return
			}
			defer c.Close()
			msg := "POST /default/default HTTP/1.1\r\nHost: x\r\nce-id: " + strings.Repeat("1", 64)
			for j := 0; j < len(msg); j++ {
				if _, err := c.Write([]byte{msg[j]}); err != nil {
					break
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 512)); err != nil && !isTimeout(err) {
					break // closed by the server (or answered 408)
				}
			}
			cut <- time.Since(start)
		}()
	}
	var longest time.Duration
	for i := 0; i < clients; i++ {
		select {
		case d := <-cut:
			if d < 0 {
				t.Fatal("could not connect")
			}
			longest = max(longest, d)
		case <-time.After(40 * time.Second):
			t.Fatalf("%d slow clients still connected after 40s", clients-i)
		}
	}
	if longest > 20*time.Second {
		t.Errorf("the last slow client was cut off after %v; want about 3 rounds of the 1 s timeout", longest)
	}
	time.Sleep(200 * time.Millisecond) // the server's side of the last connections winds down
	after := b.metric("go_goroutines")
	if after > before+4 {
		t.Errorf("goroutines %v before the slow clients, %v after they were cut off", before, after)
	}
	if st, body := postBinary(t, b.base+"/default/default", ceHeaders("after-slowloris", "t"), []byte("{}")); st != 202 {
		t.Errorf("after the slow clients: %d %q", st, body)
	}
	t.Logf("20 slow clients cut off within %v; goroutines %v before, %v after", longest, before, after)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
