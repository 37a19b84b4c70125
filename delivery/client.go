package delivery

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/sluice-broker/sluice/delivery/h1"
)

// ClientOption configures NewClient.
type ClientOption func(*clientConfig)

type clientConfig struct {
	deny DenyList
}

// WithDenyEgress makes the client refuse to connect to any address in deny (the
// --deny-egress flag of `sluice serve`), checked on the address each connection is
// dialed to, after name resolution: a delivery there fails, is not retried, and is
// dead-lettered (ErrEgressDenied). Default: none.
func WithDenyEgress(deny DenyList) ClientOption {
	return func(c *clientConfig) { c.deny = deny }
}

// NewClient returns the HTTP client Sluice delivers with, meant to be shared by every
// dispatcher of a process. Go's default keeps 2 idle connections per host, so at tens of
// thousands of events per second most requests would open a new connection; this one
// keeps up to 1024 idle keep-alive connections per host, opens at most
// DefaultMaxConnsPerHost to one host (a request beyond waits for one to come free),
// closes idle ones after DefaultIdleTimeout, and dials in at most 5 s with 30 s TCP
// keep-alive. http:// subscribers are reached through h1.Transport (HTTP/1.1: one
// request per connection at a time keeps head-of-line blocking out of per-attempt
// timeouts), which writes each request in one system call and reads the response
// without net/http's per-connection goroutines; https:// ones through net/http's
// Transport, verified against the system's CAs, over HTTP/2 when the subscriber offers
// it in the TLS handshake (as Knative's dispatcher does) and HTTP/1.1 otherwise. A
// Target's CACerts get a client of their own, with the same deny-list. Redirects are not
// followed: a 3xx is a failed delivery. Per-attempt timeouts come from the request
// context (Policy.Timeout), not from the client. Response heads are bounded by
// MaxResponseHeaderBytes and MaxResponseHeaderFields on every transport.
func NewClient(opts ...ClientOption) *http.Client {
	var cfg clientConfig
	for _, o := range opts {
		o(&cfg)
	}
	d := cfg.dialer()
	t := newHTTPTransport(d, nil)
	t.MaxIdleConns = 16384
	t.WriteBufferSize = 16 << 10
	t.ReadBufferSize = 8 << 10
	return &http.Client{
		Transport: &transport{Transport: h1.New(h1.Options{Dialer: *d, Fallback: t, MaxIdleConnsPerHost: t.MaxIdleConnsPerHost,
			MaxConnsPerHost: t.MaxConnsPerHost, IdleTimeout: t.IdleConnTimeout}), deny: cfg.deny},
		CheckRedirect: noRedirects,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// dialer is the dialer of every delivery connection: 5 s to connect, 30 s TCP
// keep-alive, and the deny-list checked on the address dialed.
func (c clientConfig) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if len(c.deny) > 0 {
		d.Control = c.deny.control
	}
	return d
}

// newHTTPTransport is net/http's transport for https destinations (tc nil: the system's
// CAs): HTTP/2 when offered in the TLS handshake, HTTP/1.1 otherwise, no proxy, no
// compression, response heads bounded by MaxResponseHeaderBytes.
func newHTTPTransport(d *net.Dialer, tc *tls.Config) *http.Transport {
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		TLSClientConfig:        tc,
		MaxIdleConnsPerHost:    1024,
		MaxConnsPerHost:        DefaultMaxConnsPerHost,
		IdleConnTimeout:        DefaultIdleTimeout,
		TLSHandshakeTimeout:    5 * time.Second,
		ExpectContinueTimeout:  0,
		ForceAttemptHTTP2:      false,
		DisableCompression:     true,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true) // negotiated over TLS only: http:// never reaches this transport
	t.Protocols = &protos
	return t
}
