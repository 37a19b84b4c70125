package httpserver

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/tlsfiles/tlstest"
)

// paths records the paths of the requests a handler was given.
type paths struct {
	mu   sync.Mutex
	seen []string
}

func (p *paths) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	p.mu.Lock()
	p.seen = append(p.seen, r.URL.Path)
	p.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

func (p *paths) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// TestSmugglingRefused sends, over raw TCP (and raw TLS), a request with both Content-Length and
// Transfer-Encoding whose body hides a second request: it is answered 400, the
// connection is closed, and the hidden request is never served.
func TestSmugglingRefused(t *testing.T) {
	const hidden = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	smuggle := map[string]string{
		// A front end that reads Content-Length forwards all of it as one request; we
		// would read the chunked body and then the hidden request.
		"CL then TE": "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len("0\r\n\r\n"+hidden)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden,
		// The same with the Transfer-Encoding folded over two lines, which net/http
		// still joins.
		"CL then folded TE": "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len("0\r\n\r\n"+hidden)) + "\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + hidden,
		// A front end that reads Transfer-Encoding forwards the chunk; we would read 4
		// bytes of body and then the hidden request.
		"TE then CL": "POST /b HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n" + strconv.FormatInt(int64(len(hidden)+5), 16) + "\r\nxxxxx" + hidden + "\r\n0\r\n\r\n",
	}
	ca := tlstest.NewCA(t, "test-ca")
	cf, kf := ca.Server(t).Write(t, t.TempDir())
	for _, mode := range []string{"lean", "net/http", "TLS"} {
		for name, req := range smuggle {
			for _, before := range []string{"", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "GET /first HTTP/1.1\r\nHost: x\r\n\r\n", "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok",
				"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n"} {
				t.Run(fmt.Sprintf("%s %s after %s", name, mode, firstLine(before)), func(t *testing.T) {
					p := &paths{}
					var c net.Conn
					var err error
					switch mode {
					case "TLS":
						s := start(t, p, WithTLS(cf, kf))
						c, err = tls.Dial("tcp", s.Addr().String(), &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"http/1.1"}})
					default:
						s := start(t, p, WithLeanHTTP1(mode == "lean"))
						c, err = net.Dial("tcp", s.Addr().String())
					}
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(30 * time.Second))
					if _, err := io.WriteString(c, before+req); err != nil {
						t.Fatal(err)
					}
					br := bufio.NewReader(c)
					if before != "" {
						resp, err := http.ReadResponse(br, nil)
						if err != nil || resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
							t.Fatalf("the request before: %v %v", resp, err)
						}
						resp.Body.Close()
					}
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					text, _ := io.ReadAll(resp.Body)
					if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(text), "both Content-Length and Transfer-Encoding") {
						t.Errorf("%d %q; want 400 naming both fields", resp.StatusCode, text)
					}
					if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
						t.Errorf("after the 400: %q, %v; want the connection closed", rest, err)
					}
					for _, path := range p.list() {
						if path != "/first" {
							t.Errorf("served %s", path)
						}
					}
				})
			}
		}
	}
}

func firstLine(s string) string {
	if s == "" {
		return "nothing"
	}
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

// TestFramer feeds requests to a framer whole and a byte at a time.
func TestFramer(t *testing.T) {
	const lookalike = "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"

	for _, tt := range []struct {
		name            string
		in              string
		heads           int
		bad, done       bool
		wantState, left int
	}{
		{"two plain", "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n", 2, false, false, frHead, 0},
		{"body that looks like a head", "POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + lookalike, 1, false, false, frBody, 100 - len(lookalike)},
		{"OPTIONS * is not counted", "OPTIONS * HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", 1, false, false, frHead, 0},
		{"chunked then plain", "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nab\r\nA;x=y\r\n0123456789\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\n\n", 2, false, false, frHead, 0},
		{"both", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 1, true, true, frHead, 0},
		{"both, HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 1, true, true, frHead, 0},
		{"both, folded", "POST / HTTP/1.1\r\nX: 1\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length:\r\n\t3\r\n\r\n", 1, true, true, frHead, 0},
		{"folded length", "POST / HTTP/1.1\r\nContent-Length:\r\n 3\r\n\r\nabc", 1, false, false, frHead, 0},
		{"two lengths", "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 0, false, true, frHead, 0},
		{"gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 1, false, true, frHead, 0},
		{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 1, false, true, frChunkSize, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			whole, bytewise := framer{}, framer{}
			whole.feed([]byte(tt.in))
			for i := range len(tt.in) {
				bytewise.feed([]byte(tt.in[i : i+1]))
			}
			for _, f := range []framer{whole, bytewise} {
				if f.heads != tt.heads || f.bad != tt.bad || f.done != tt.done || f.state != tt.wantState || f.left != int64(tt.left) {
					t.Errorf("heads %d bad %v done %v state %d left %d; want %d %v %v %d %d", f.heads, f.bad, f.done, f.state, f.left, tt.heads, tt.bad, tt.done, tt.wantState, tt.left)
				}
			}
		})
	}
}

// FuzzFramer checks that a framer does not panic and reaches the same verdict whether
// the bytes come whole or in two pieces.
func FuzzFramer(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 7)
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"), 30)
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), 40)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		if cut < 0 || cut > len(in) {
			cut = len(in) / 2
		}
		whole, split := framer{}, framer{}
		whole.feed(in)
		split.feed(in[:cut])
		split.feed(in[cut:])
		if whole.bad != split.bad || whole.heads != split.heads || whole.state != split.state || whole.left != split.left {
			t.Errorf("whole: bad %v heads %d state %d left %d; split at %d: bad %v heads %d state %d left %d",
				whole.bad, whole.heads, whole.state, whole.left, cut, split.bad, split.heads, split.state, split.left)
		}
		if whole.bad && !bytes.Contains(bytes.ToLower(in), []byte("transfer-encoding")) {
			t.Error("bad without a Transfer-Encoding")
		}
	})
}
