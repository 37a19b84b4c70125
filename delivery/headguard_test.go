package delivery

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// Bounds of the tests of a subscriber that answers with an endless head: what it writes
// is capped (so that a transport reading without bound fails the test instead of taking
// the machine's memory), and what it may write before the broker hangs up is well above
// the head's bound plus both sockets' kernel buffers yet far below the cap.
const (
	endlessCap    = 32 << 20
	endlessBudget = 4 << 20
)

// headSubscriber is a real subscriber on 127.0.0.1 (plain TCP, or TLS with its
// certificate in ca) that reads each request and answers with head, then, when endless,
// with "a" for ever (up to endlessCap): the value of a header line that never ends. It
// counts the bytes it managed to write for each request (one per connection when
// endless) before the broker hung up.
type headSubscriber struct {
	url     string
	ca      string
	mu      sync.Mutex
	written []int64 // per request
}

func newHeadSubscriber(t *testing.T, useTLS bool, head string, endless bool) *headSubscriber {
	t.Helper()
	s := &headSubscriber{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String() + "/"
	if useTLS {
		cert, leaf := selfSigned(t)
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		s.url = "https://" + strings.TrimPrefix(s.url, "http://")
		s.ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf}))
	}
	var wg sync.WaitGroup
	var open sync.Map // net.Conn → struct{}: closed by the cleanup (keep-alive ones idle)
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Store(c, struct{}{})
			wg.Go(func() { s.serve(c, head, endless) })
		}
	})
	return s
}

func (s *headSubscriber) serve(c net.Conn, head string, endless bool) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second)) // bounds a hang only
	raw := c
	if tc, ok := c.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	// A fixed send buffer: what the kernel holds for the broker is then its receive
	// buffer and this, not a send buffer grown to megabytes by autotuning.
	raw.(*net.TCPConn).SetWriteBuffer(64 << 10)
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		n, err := io.WriteString(c, head)
		written := int64(n)
		chunk := bytes.Repeat([]byte("a"), 16<<10)
		for endless && err == nil && written < endlessCap {
			n, err = c.Write(chunk)
			written += int64(n)
		}
		if endless && err == nil { // wait for the broker to hang up
			io.Copy(io.Discard, c)
		}
		s.mu.Lock()
		s.written = append(s.written, written)
		s.mu.Unlock()
		if endless {
			return
		}
	}
}

func (s *headSubscriber) conns() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.written...)
}

// selfSigned returns a TLS certificate for 127.0.0.1 and its DER: the one httptest's
// servers use.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	ts := newTLSSubscriber(t) // only for its certificate
	return ts.TLS.Certificates[0], ts.Certificate().Raw
}

// manyFields is a response head with n header fields in all, Content-Length included.
func manyFields(n int) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "X-F%d: 1\r\n", i)
	}
	b.WriteString("\r\n")
	return b.String()
}

// TestResponseHeadBounded: a subscriber whose response head passes
// MaxResponseHeaderBytes (an endless header line) or MaxResponseHeaderFields fails the
// attempt, on Sluice's HTTP/1.1 transport and on net/http's (https): the attempt is
// retried per the policy, then the event is dead-lettered with knativeerrordata naming
// the limit, and the broker stopped reading the endless line early (the subscriber could
// write little more than the bound and the kernel's socket buffers before the broker hung
// up). A head of exactly MaxResponseHeaderFields fields is delivered.
func TestResponseHeadBounded(t *testing.T) {
	endless := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Endless: "
	for _, tc := range []struct {
		name      string
		tls       bool
		head      string
		endless   bool
		delivered bool
		reason    string
	}{
		{"endless line", false, endless, true, false, "MaxResponseHeaderBytes"},
		{"endless status line", false, "HTTP/1.1 200 OK", true, false, "MaxResponseHeaderBytes"},
		{"endless line after 100 Continue", false, "HTTP/1.1 100 Continue\r\n\r\n" + endless, true, false, "MaxResponseHeaderBytes"},
		{"too many fields", false, manyFields(MaxResponseHeaderFields + 1), false, false, "MaxResponseHeaderFields"},
		{"fields at the bound", false, manyFields(MaxResponseHeaderFields), false, true, ""},
		{"https endless line", true, endless, true, false, fmt.Sprint(MaxResponseHeaderBytes)},
		{"https too many fields", true, manyFields(MaxResponseHeaderFields + 1), false, false, "MaxResponseHeaderFields"},
		{"https fields at the bound", true, manyFields(MaxResponseHeaderFields), false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := newHeadSubscriber(t, tc.tls, tc.head, tc.endless)
			dls := newServer(t, nil)
			q, pub := newQueue(t)
			target := Target{Name: "ns/t", URL: sub.url, CACerts: sub.ca,
				Policy: Policy{Retry: 1, Delay: time.Millisecond, Timeout: 30 * time.Second, DeadLetterSink: dls.URL}}
			d := NewDispatcher(q, target, WithClient(NewClient()))
			stop := run(t, d)
			pub(newEvent("e1"))
			sluicetest.Eventually(t, 60*time.Second, "settled", func() bool { return q.acked.Load() == 1 })
			stop()
			got := dls.received()
			if tc.delivered {
				if len(got) != 0 {
					t.Fatalf("dead-lettered a response within the bounds")
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("dead-letter sink got %d events, want 1", len(got))
			}
			enc, _ := got[0].ev.Get(ExtErrorData)
			data, _ := base64.StdEncoding.DecodeString(enc)
			if !strings.Contains(string(data), tc.reason) {
				t.Errorf("knativeerrordata %q does not name the limit %s", data, tc.reason)
			}
			if code, _ := got[0].ev.Get(ExtErrorCode); code != "500" {
				t.Errorf("knativeerrorcode %q, want 500 (no response)", code)
			}
			sluicetest.Eventually(t, 30*time.Second, "both attempts answered", func() bool { return len(sub.conns()) == 2 })
			for i, n := range sub.conns() {
				t.Logf("attempt %d: the subscriber wrote %d bytes", i+1, n)
				if n > endlessBudget {
					t.Errorf("attempt %d: the subscriber wrote %d bytes before the broker hung up; want at most %d", i+1, n, endlessBudget)
				}
			}
		})
	}
}
