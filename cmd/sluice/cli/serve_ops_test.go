package cli

import (
	"context"
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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// served is a `sluice serve` run in-process by startServe.
type served struct {
	base string        // scheme://127.0.0.1:port
	log  *lockedBuffer // its stderr: the log
}

// startServe runs serve with args (and the config yaml, when not empty) on a free
// loopback port until the test ends, and waits until it prints its ingest URL.
func startServe(t *testing.T, yaml string, args ...string) *served {
	t.Helper()
	keepGC(t)
	if yaml != "" {
		cfg := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout lockedBuffer
	s := &served{log: &lockedBuffer{}}
	exited := make(chan int, 1)
	go func() {
		exited <- Execute(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--shutdown-timeout", "2s"}, args...), &stdout, s.log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not exit 30s after its context ended")
		}
	})
	sluicetest.Eventually(t, 30*time.Second, "serve prints its ingest URL", func() bool {
		return strings.Contains(stdout.String(), "ingest: ")
	})
	u, _, _ := strings.Cut(strings.TrimPrefix(stdout.String()[strings.Index(stdout.String(), "ingest: "):], "ingest: "), "\n")
	base, err := sluicetest.BaseOf(u)
	if err != nil {
		t.Fatal(err)
	}
	s.base = base
	return s
}

// get GETs url with the Authorization header authz (none when empty) and returns the
// status and body.
func get(t *testing.T, c *http.Client, url, authz string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServeRedactsSubscriberCredentials: a trigger's subscriber URL with a user name,
// password and ?token= gets them (the delivery uses the real URL), and nothing Sluice
// shows does: /status, /ui/snapshot.json, the log, the dead letter's knativeerrordest.
func TestServeRedactsSubscriberCredentials(t *testing.T) {
	const password, token = "hunter2pw", "abc0token0abc"
	var gotToken atomic.Value
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotToken.Store(r.URL.Query().Get("token"))
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer sub.Close()
	dest := make(chan string, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case dest <- r.Header.Get("Ce-Knativeerrordest"):
		default:
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()
	subURL := strings.Replace(sub.URL, "http://", "http://alice:"+password+"@", 1) + "/hook?token=" + token + "&page=1"
	s := startServe(t, fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: shop, namespace: demo}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: orders, namespace: demo}
spec:
  broker: shop
  subscriber: {uri: %q}
  delivery: {retry: 0, deadLetterSink: {uri: %q}}
---
# not ready: its reason quotes the uri
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: bad, namespace: demo}
spec:
  broker: shop
  subscriber: {uri: %q}
`, subURL, sink.URL, "ftp://alice:"+password+"@files.example/x?token="+token), "--log-level", "debug")
	if err := sluicetest.WaitReady(s.base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.base+"/demo/shop", strings.NewReader("{}"))
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", "1")
	req.Header.Set("Ce-Source", "/test")
	req.Header.Set("Ce-Type", "order.created")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingress: %s", resp.Status)
	}
	var errDest string
	select {
	case errDest = <-dest:
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing reached the dead-letter sink:\n%s", s.log.String())
	}
	if gotToken.Load() != token {
		t.Errorf("the subscriber got token %v: the delivery must use the real URL", gotToken.Load())
	}
	var snapshot string
	sluicetest.Eventually(t, 30*time.Second, "the dead letter on /ui/snapshot.json", func() bool {
		_, snapshot = get(t, http.DefaultClient, s.base+"/ui/snapshot.json", "")
		return strings.Contains(snapshot, `"dest":"http://alice:`)
	})
	_, status := get(t, http.DefaultClient, s.base+"/status", "")
	if !strings.Contains(status, "token=xxxxx") || !strings.Contains(status, `ftp://alice:xxxxx@files.example/x?token=xxxxx\" is not an absolute`) {
		t.Errorf("/status does not show the redacted subscriber URL: %s", status)
	}
	if !strings.Contains(s.log.String(), "alice:xxxxx@") {
		t.Errorf("the log does not show the redacted subscriber URL:\n%s", s.log.String())
	}
	var wide, errOut lockedBuffer
	Execute(context.Background(), []string{"status", "--addr", s.base, "-o", "wide"}, &wide, &errOut)
	if !strings.Contains(wide.String(), "token=xxxxx") {
		t.Errorf("sluice status -o wide does not show the redacted URL: %s %s", wide.String(), errOut.String())
	}
	for what, text := range map[string]string{"knativeerrordest": errDest, "/status": status, "/ui/snapshot.json": snapshot,
		"the log": s.log.String(), "sluice status -o wide": wide.String()} {
		if strings.Contains(text, password) || strings.Contains(text, token) {
			t.Errorf("%s shows a credential of the subscriber URL: %s", what, text)
		}
	}
	if want := "http://alice:xxxxx@" + strings.TrimPrefix(sub.URL, "http://") + "/hook?token=xxxxx&page=1"; errDest != want {
		t.Errorf("knativeerrordest %q, want %q", errDest, want)
	}
}

// TestServeOpsToken: with --ops-token-file, /metrics, /status, /ui, /ui/snapshot.json
// and the profiler answer 401 without the token (bearer or Basic password) and 200 with
// it; the probes and the ingress stay open. A thousand refusals log a handful of lines
// that count them all.
func TestServeOpsToken(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	file := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "", "--ops-token-file", file, "--pprof")
	if err := sluicetest.WaitReady(s.base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	refused := 0 // 401s so far
	for _, tc := range []struct {
		path      string
		guarded   bool
		openCode  int // with no token, when not guarded
		authzCode int // with the token
	}{
		{"/metrics", true, 0, 200},
		{"/status", true, 0, 200},
		{"/ui/", true, 0, 200},
		{"/ui/snapshot.json", true, 0, 200},
		{"/debug/pprof/", true, 0, 200},
		{"/healthz", false, 200, 200},
		{"/readyz", false, 200, 200},
		{"/default/default", false, 405, 405}, // the ingress: GET is not allowed, but not 401
	} {
		code, _ := get(t, http.DefaultClient, s.base+tc.path, "")
		want := tc.openCode
		if tc.guarded {
			want = http.StatusUnauthorized
			refused += 2 // this one and the wrong token's below
		}
		if code != want {
			t.Errorf("GET %s without the token: %d, want %d", tc.path, code, want)
		}
		if code, _ := get(t, http.DefaultClient, s.base+tc.path, "Bearer wrong-token-wrong-token"); tc.guarded && code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", tc.path, code)
		}
		if code, _ := get(t, http.DefaultClient, s.base+tc.path, "Bearer "+tok); code != tc.authzCode {
			t.Errorf("GET %s with the bearer token: %d, want %d", tc.path, code, tc.authzCode)
		}
		req, _ := http.NewRequest(http.MethodGet, s.base+tc.path, nil)
		req.SetBasicAuth("admin", tok)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != tc.authzCode {
			t.Errorf("GET %s with the token as a Basic password: %v %v, want %d", tc.path, resp.Status, err, tc.authzCode)
		} else {
			resp.Body.Close()
		}
	}
	var out, errOut lockedBuffer
	if code := Execute(context.Background(), []string{"status", "--addr", s.base, "--ops-token-file", file}, &out, &errOut); code != 0 {
		t.Errorf("sluice status --ops-token-file: exit %d: %s", code, errOut.String())
	}
	if code := Execute(context.Background(), []string{"top", "--once", "--addr", s.base, "--ops-token-file", file}, &out, &errOut); code != 0 {
		t.Errorf("sluice top --ops-token-file: exit %d: %s", code, errOut.String())
	}
	const n = 1000
	c := &http.Client{}
	for range n {
		if code, _ := get(t, c, s.base+"/metrics", ""); code != http.StatusUnauthorized {
			t.Fatalf("GET /metrics without the token: %d", code)
		}
	}
	// Each line is one refusal, or a summary that counts the others of its period.
	counted := func() (lines, refusals int) {
		for _, l := range strings.Split(s.log.String(), "\n") {
			if !strings.Contains(l, "operator endpoint refused") {
				continue
			}
			lines++
			if m := regexp.MustCompile(`suppressed=(\d+)`).FindStringSubmatch(l); m != nil {
				k, _ := strconv.Atoi(m[1])
				refusals += k
			} else {
				refusals++
			}
		}
		return lines, refusals
	}
	refused += n
	sluicetest.Eventually(t, 60*time.Second, "the log counts every refusal", func() bool {
		_, got := counted()
		return got == refused
	})
	lines, got := counted()
	if lines > 10 {
		t.Errorf("%d refusals logged %d lines, want a handful", n, lines)
	}
	if !strings.Contains(s.log.String(), "more like this in the last 10s") {
		t.Errorf("no summary line:\n%s", s.log.String())
	}
	t.Logf("%d lines count %d refusals", lines, got)
}

// TestServeRateLimitsRefusalLogs: with sender identity on, a thousand requests without a
// token get 401 and log a handful of lines, whose summaries count the others; a hundred
// failed TLS handshakes log a handful too.
func TestServeRateLimitsRefusalLogs(t *testing.T) {
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
	certFile, keyFile := writeSelfSigned(t, dir)
	s := startServe(t, "", "--oidc-issuer", "https://issuer.test", "--oidc-jwks-file", jwksFile,
		"--tls-cert", certFile, "--tls-key", keyFile)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own certificate
	const n = 1000
	for range n {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/default/default", strings.NewReader("{}"))
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", "1")
		req.Header.Set("Ce-Source", "/test")
		req.Header.Set("Ce-Type", "t")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("POST without a token: %s, want 401", resp.Status)
		}
	}
	host := strings.TrimPrefix(s.base, "https://")
	const handshakes = 100
	for range handshakes {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // plain HTTP to the TLS port
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, conn)
		conn.Close()
	}
	count := func(what string) (lines, total int) {
		for _, l := range strings.Split(s.log.String(), "\n") {
			if !strings.Contains(l, what) {
				continue
			}
			lines++
			if m := regexp.MustCompile(`suppressed=(\d+)`).FindStringSubmatch(l); m != nil {
				k, _ := strconv.Atoi(m[1])
				total += k
			} else {
				total++
			}
		}
		return lines, total
	}
	sluicetest.Eventually(t, 60*time.Second, "the log counts every refusal and every failed handshake", func() bool {
		_, r := count("request refused")
		_, h := count("TLS handshake failed")
		return r == n && h == handshakes
	})
	for what, max := range map[string]int{"request refused": 10, "TLS handshake failed": 10} {
		if lines, _ := count(what); lines > max {
			t.Errorf("%q: %d lines, want at most %d", what, lines, max)
		}
	}
	if !strings.Contains(s.log.String(), "more like this in the last 10s") {
		t.Errorf("no summary line:\n%s", s.log.String())
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
