package httpserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/tlsfiles/tlstest"
)

// newServer returns a server of h on a free loopback port, not serving yet.
func newServer(t testing.TB, h http.Handler, opts ...Option) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(ln, h, opts...)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	return s
}

// start serves h with opts on a free loopback port until the test ends.
func start(t testing.TB, h http.Handler, opts ...Option) *Server {
	t.Helper()
	s := newServer(t, h, append([]Option{WithErrorLog(log.New(io.Discard, "", 0))}, opts...)...)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// whoami answers the protocol and the client certificate's common name.
var whoami = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	cn := "-"
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	io.WriteString(w, r.Proto+" "+cn)
})

func get(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func tlsClient(roots *tlstest.CA, h2 bool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots.Pool(), Certificates: certs}}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(h2)
	tr.Protocols = &p
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

func TestTLSServesHTTP1AndHTTP2(t *testing.T) {
	ca := tlstest.NewCA(t, "test-ca")
	cf, kf := ca.Server(t).Write(t, t.TempDir())
	s := start(t, whoami, WithTLS(cf, kf))
	if s.Scheme() != "https" {
		t.Fatalf("Scheme() = %q, want https", s.Scheme())
	}
	url := "https://" + s.Addr().String() + "/"
	for _, tt := range []struct {
		h2   bool
		want string
	}{{true, "HTTP/2.0 -"}, {false, "HTTP/1.1 -"}} {
		got, err := get(t, tlsClient(ca, tt.h2), url)
		if err != nil || got != tt.want {
			t.Errorf("h2 offered=%v: %q, %v; want %q", tt.h2, got, err, tt.want)
		}
	}
	// TLS 1.1 is refused.
	c := tlsClient(ca, false)
	c.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := get(t, c, url); err == nil {
		t.Error("a TLS 1.1 client was served; want the handshake refused")
	}
	// Plain HTTP to the TLS port gets no event in.
	resp, err := http.Post("http://"+s.Addr().String()+"/", "text/plain", strings.NewReader("x"))
	if err == nil {
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d, want 400", resp.StatusCode)
		}
		resp.Body.Close()
	}
}

// TestCertificateRotation replaces the certificate files while the server runs: new
// handshakes get the new certificate, without a restart.
func TestCertificateRotation(t *testing.T) {
	ca := tlstest.NewCA(t, "test-ca")
	dir := t.TempDir()
	first := ca.Server(t)
	cf, kf := first.Write(t, dir)
	s := start(t, whoami, WithTLS(cf, kf))
	serial := func() string {
		conn, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := serial(); got != first.Serial.String() {
		t.Fatalf("serving serial %s, want the first certificate's %s", got, first.Serial)
	}
	second := ca.Server(t)
	second.Write(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for serial() != second.Serial.String() {
		if time.Now().After(deadline) {
			t.Fatalf("still serving the first certificate 10s after the files were replaced")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A broken write (a key that does not match) keeps the last good pair.
	third := ca.Server(t)
	third.KeyPEM = first.KeyPEM
	third.Write(t, dir)
	time.Sleep(1200 * time.Millisecond)
	if got := serial(); got != second.Serial.String() {
		t.Errorf("after a bad pair was written: serving %s, want the last good %s", got, second.Serial)
	}
	if s.cert.LastError() == nil {
		t.Error("LastError() = nil after a pair that does not load")
	}
}

func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "server-ca")
	clients := tlstest.NewCA(t, "client-ca")
	other := tlstest.NewCA(t, "other-ca")
	dir := t.TempDir()
	cf, kf := ca.Server(t).Write(t, dir)
	caFile := dir + "/clients.pem"
	if err := writeFile(caFile, clients.PEM); err != nil {
		t.Fatal(err)
	}
	url := func(s *Server) string { return "https://" + s.Addr().String() + "/" }
	optional := start(t, whoami, WithTLS(cf, kf), WithClientCA(caFile, false))
	required := start(t, whoami, WithTLS(cf, kf), WithClientCA(caFile, true))
	alice := clients.Client(t, "system:serviceaccount:shop:alice").TLS(t)
	mallory := other.Client(t, "system:serviceaccount:shop:alice").TLS(t)

	if got, err := get(t, tlsClient(ca, true, alice), url(optional)); err != nil || got != "HTTP/2.0 system:serviceaccount:shop:alice" {
		t.Errorf("client certificate: %q, %v; want its common name", got, err)
	}
	if got, err := get(t, tlsClient(ca, false, alice), url(optional)); err != nil || got != "HTTP/1.1 system:serviceaccount:shop:alice" {
		t.Errorf("client certificate over HTTP/1.1: %q, %v; want its common name", got, err)
	}
	if got, err := get(t, tlsClient(ca, true), url(optional)); err != nil || got != "HTTP/2.0 -" {
		t.Errorf("no client certificate, optional: %q, %v; want served without identity", got, err)
	}
	// Go's client sends only a certificate the server's CA list accepts: another CA's
	// gets no identity where one is optional, and no handshake where one is required.
	if got, err := get(t, tlsClient(ca, true, mallory), url(optional)); err != nil || got != "HTTP/2.0 -" {
		t.Errorf("a certificate of another CA, optional: %q, %v; want served without identity", got, err)
	}
	if got, err := get(t, tlsClient(ca, true, mallory), url(required)); err == nil {
		t.Errorf("a certificate of another CA, required: served %q", got)
	}
	if _, err := get(t, tlsClient(ca, true), url(required)); err == nil {
		t.Error("no client certificate, required: served; want the handshake refused")
	}
	if got, err := get(t, tlsClient(ca, false, alice), url(required)); err != nil || got != "HTTP/1.1 system:serviceaccount:shop:alice" {
		t.Errorf("required, with certificate: %q, %v", got, err)
	}
}

// TestHeaderBytesCapped: a head beyond WithMaxHeaderBytes is answered 431, with and
// without the lean path. (That a raw client still sending reads it rather than a reset —
// limitListener keeps CloseWrite — is TestLeanAnswersAsNetHTTP's "headers beyond the
// limit", which fails with netutil.LimitListener.)
func TestHeaderBytesCapped(t *testing.T) {
	for _, lean := range []bool{true, false} {
		t.Run(fmt.Sprintf("lean=%t", lean), func(t *testing.T) {
			s := start(t, whoami, WithMaxHeaderBytes(4<<10), WithLeanHTTP1(lean))
			req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+"/", nil)
			req.Header.Set("X-Big", strings.Repeat("a", 16<<10))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("16 KiB of headers: %d, want 431", resp.StatusCode)
			}
		})
	}
}

// TestSlowlorisBounded opens many connections that send their headers one byte a second:
// the server holds at most MaxConns of them at once, in a bounded number of goroutines,
// and closes each when its read-header timeout passes.
func TestSlowlorisBounded(t *testing.T) {
	const maxConns, clients = 8, 40
	base := runtime.NumGoroutine()
	s := start(t, whoami, WithMaxConns(maxConns), WithReadHeaderTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	cut := make(chan time.Duration, clients)
	for range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				return
			}
			defer c.Close()
			start := time.Now()
			msg := "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100)
			for i := 0; i < len(msg) && ctx.Err() == nil; i++ {
				if _, err := c.Write([]byte{msg[i]}); err != nil {
					break
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					break // the server closed (or answered) the connection
				}
			}
			cut <- time.Since(start)
		})
	}
	peak := 0
	sample := time.NewTicker(100 * time.Millisecond)
	for i := 0; i < 30; i++ {
		<-sample.C
		if n := runtime.NumGoroutine() - base - clients; n > peak {
			peak = n
		}
	}
	sample.Stop()
	wg.Wait()
	close(cut)
	var longest time.Duration
	n := 0
	for d := range cut {
		n++
		longest = max(longest, d)
	}
	// Each served connection is one goroutine of the server; the serve loop and the
	// test's own goroutines add a few.
	if peak > maxConns+6 {
		t.Errorf("peak server goroutines %d with %d slow clients; want at most about %d (the connection cap)", peak, clients, maxConns)
	}
	// 40 clients through 8 slots of 1 s each: 5 rounds, each cut after ~1 s (+1 s of
	// the client's own read wait).
	if longest > 15*time.Second {
		t.Errorf("a slow client was held %v; want each cut off after the read-header timeout", longest)
	}
	t.Logf("%d slow clients, peak %d server goroutines, longest held %v", n, peak, longest)
}

// TestNonReadingClientCutOff: a client that sends a request and never reads the (large)
// response is disconnected when the write timeout passes; the handler's write fails.
func TestNonReadingClientCutOff(t *testing.T) {
	wrote := make(chan error, 1)
	big := bytes.Repeat([]byte("x"), 64<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		for i := 0; i < 1<<14 && err == nil; i++ { // up to 1 GiB
			_, err = w.Write(big)
		}
		wrote <- err
	})
	s := start(t, h, WithWriteTimeout(time.Second))
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	begin := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the handler wrote 1 GiB to a client that reads nothing")
		}
		if d := time.Since(begin); d > 10*time.Second {
			t.Errorf("cut off after %v; want about the 1s write timeout", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler still writing 20s later; want it cut off by the write timeout")
	}
}

func TestOptionsValidated(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tt := range []struct {
		opt  Option
		want string
	}{
		{WithMaxConns(0), "WithMaxConns(0)"},
		{WithReadHeaderTimeout(0), "WithReadHeaderTimeout"},
		{WithMaxHeaderBytes(10), "WithMaxHeaderBytes(10)"},
		{WithTLS("a.pem", ""), "WithTLS"},
		{WithClientCA("ca.pem", true), "WithClientCA needs WithTLS"},
		{WithTLS("/nonexistent/c.pem", "/nonexistent/k.pem"), "--tls-cert/--tls-key"},
	} {
		if _, err := New(ln, whoami, tt.opt); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: %v; want an error containing %q", err, tt.want)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
