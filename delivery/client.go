package delivery

import (
	"net"
	"net/http"
	"time"
)

// NewClient returns the HTTP client Sluice delivers with, meant to be shared by every
// dispatcher of a process. Go's default keeps 2 idle connections per host, so at tens of
// thousands of events per second most requests would open a new connection; this one
// keeps up to 1024 idle keep-alive connections per host, opens at most
// DefaultMaxConnsPerHost to one host (a request beyond waits for one to come free),
// closes idle ones after DefaultIdleTimeout, and dials in at most 5 s with 30 s TCP
// keep-alive. http:// subscribers are reached through h1Transport (HTTP/1.1: one
// request per connection at a time keeps head-of-line blocking out of per-attempt
// timeouts), which writes each request in one system call and reads the response
// without net/http's per-connection goroutines; https:// ones through net/http's
// Transport, verified against the system's CAs, over HTTP/2 when the subscriber offers
// it in the TLS handshake (as Knative's dispatcher does) and HTTP/1.1 otherwise. A
// Target's CACerts get a client of their own. Redirects are not followed: a 3xx is a failed delivery. Per-attempt
// timeouts come from the request context (Policy.Timeout), not from the client.
func NewClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          16384,
		MaxIdleConnsPerHost:   1024,
		MaxConnsPerHost:       DefaultMaxConnsPerHost,
		IdleConnTimeout:       DefaultIdleTimeout,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: 0,
		ForceAttemptHTTP2:     false,
		DisableCompression:    true,
		WriteBufferSize:       16 << 10,
		ReadBufferSize:        8 << 10,
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true) // negotiated over TLS only: http:// never reaches this transport
	t.Protocols = &protos
	return &http.Client{
		Transport:     newH1Transport(*d, t, t.MaxIdleConnsPerHost, t.MaxConnsPerHost, t.IdleConnTimeout),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
