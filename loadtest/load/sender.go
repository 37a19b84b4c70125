package load

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/loadtest/cevent"
)

// outgoing is one request a worker is about to send.
type outgoing struct {
	seq    uint64 // sequence number of its (first) event
	sent   int64  // intended send time, Unix ns
	warmup bool
}

// sender turns an outgoing request into an HTTP exchange. Each worker owns one; a
// sender is not safe for concurrent use.
type sender interface {
	// send returns the status, the response bytes read, and the request body's size
	// (vegeta's "bytes out").
	send(o outgoing) (status int, bytesIn, bytesOut int64, err error)
	abort() // unblock a send in progress (on cancellation)
	warm()  // open the connection ahead of the first send, if the sender keeps one
}

// newSender returns the raw HTTP/1.1 sender for http:// targets and a net/http one for
// https:// (or when std is set).
func newSender(target *url.URL, t *cevent.Template, timeout time.Duration, std *http.Client, hdr [][2]string) sender {
	if std != nil {
		return &stdSender{client: std, url: target.String(), tmpl: t, hdr: hdr}
	}
	host := target.Host
	addr := host
	if target.Port() == "" {
		addr = net.JoinHostPort(target.Hostname(), "80")
	}
	path := target.RequestURI()
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sluice-load\r\nContent-Type: %s\r\n", path, host, t.ContentType())
	if t.Mode == cevent.Binary {
		// Encoded as Sluice encodes for subscribers (event.EncodeHeaderValue): a --type or
		// --source with CR/LF must not corrupt the request; spaces and non-ASCII travel as
		// written, as cloudevents/sdk-go senders write them.
		fmt.Fprintf(&head, "Ce-Specversion: 1.0\r\nCe-Type: %s\r\nCe-Source: %s\r\nCe-%s: %s\r\n",
			event.EncodeHeaderValue(t.Type), event.EncodeHeaderValue(t.Source), cevent.ExtRun, t.Run)
	}
	for _, h := range hdr {
		fmt.Fprintf(&head, "%s: %s\r\n", h[0], h[1])
	}
	return &rawSender{
		conn: rawConn{addr: addr, timeout: timeout, dialer: net.Dialer{Timeout: timeout}},
		head: head.Bytes(),
		tmpl: t,
		buf:  make([]byte, 0, 1024+len(t.Data)*t.EventsPerRequest()+256*t.EventsPerRequest()),
	}
}

// rawSender assembles the whole request — pre-encoded fixed headers, the few varying
// ones appended with strconv, then the body — into one reused buffer.
type rawSender struct {
	conn rawConn
	head []byte
	tmpl *cevent.Template
	buf  []byte
	body []byte
}

func (s *rawSender) send(o outgoing) (int, int64, int64, error) {
	var body []byte
	s.buf, body = s.build(o)
	status, in, err := s.conn.roundTrip(s.buf)
	return status, in, int64(len(body)), err
}

// build assembles the request for o into s.buf and returns it and its body.
func (s *rawSender) build(o outgoing) ([]byte, []byte) {
	t := s.tmpl
	b := append(s.buf[:0], s.head...)
	var body []byte
	if t.Mode == cevent.Binary {
		body = t.Data
		b = append(b, "Ce-Id: "...)
		b = t.AppendID(b, o.seq)
		b = append(b, "\r\nCe-"+cevent.ExtSeq+": "...)
		b = strconv.AppendUint(b, o.seq, 10)
		b = append(b, "\r\nCe-"+cevent.ExtSent+": "...)
		b = strconv.AppendInt(b, o.sent, 10)
		b = append(b, "\r\n"...)
		if o.warmup {
			b = append(b, "Ce-"+cevent.ExtWarmup+": 1\r\n"...)
		}
	} else {
		s.body = t.AppendBody(s.body[:0], o.seq, o.sent, o.warmup)
		body = s.body
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	return b, body
}

func (s *rawSender) abort() { s.conn.abort() }

func (s *rawSender) warm() { _ = s.conn.dial() }

var errAborted = errors.New("load: cancelled")

// stdSender sends through net/http (TLS targets).
type stdSender struct {
	client *http.Client
	url    string
	tmpl   *cevent.Template
	body   []byte
	hdr    [][2]string // Options.Header
}

func (s *stdSender) send(o outgoing) (int, int64, int64, error) {
	t := s.tmpl
	s.body = t.AppendBody(s.body[:0], o.seq, o.sent, o.warmup)
	req, err := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(s.body))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", t.ContentType())
	for _, h := range s.hdr {
		req.Header.Set(h[0], h[1])
	}
	if t.Mode == cevent.Binary {
		h := req.Header
		h["Ce-Specversion"] = []string{"1.0"}
		h["Ce-Type"] = []string{event.EncodeHeaderValue(t.Type)}
		h["Ce-Source"] = []string{event.EncodeHeaderValue(t.Source)}
		h["Ce-Id"] = []string{string(t.AppendID(nil, o.seq))}
		h["Ce-"+cevent.ExtRun] = []string{t.Run}
		h["Ce-"+cevent.ExtSeq] = []string{strconv.FormatUint(o.seq, 10)}
		h["Ce-"+cevent.ExtSent] = []string{strconv.FormatInt(o.sent, 10)}
		if o.warmup {
			h["Ce-"+cevent.ExtWarmup] = []string{"1"}
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, 0, int64(len(s.body)), err
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, n, int64(len(s.body)), nil
}

func (s *stdSender) abort() {}

func (s *stdSender) warm() {}

// newStdClient returns a net/http client whose keep-alive pool is sized to the number
// of connections (Go's default keeps only 2 idle connections per host).
func newStdClient(conns int, timeout time.Duration, insecure bool) *http.Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: insecure}, //nolint:gosec // opt-in flag for test targets
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}
