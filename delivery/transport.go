package delivery

import (
	"context"
	"net/http"
	"time"

	"github.com/sluice-broker/sluice/delivery/h1"
)

// Defaults of the delivery client's connection pool.
const (
	// DefaultMaxConnsPerHost bounds the connections open to one subscriber host:port,
	// shared by every trigger delivering there: four triggers at the default in-flight
	// limit.
	DefaultMaxConnsPerHost = 4 * DefaultMaxInFlight
	// DefaultIdleTimeout is how long an unused keep-alive connection is kept, as in
	// net/http.
	DefaultIdleTimeout = 90 * time.Second
)

// Bounds on a subscriber's response head (status line and header fields, informational
// responses included), on every transport NewClient makes. net/http reads a header line
// of any length and any number of fields: a subscriber answering with an endless header
// line would make the broker buffer it all. A response over either bound is a failed
// attempt (retried, then dead-lettered) whose error names the bound.
const (
	// MaxResponseHeaderBytes bounds the bytes of a response head: 64 KiB, eight times
	// the 8 KiB most servers and proxies (nginx, Envoy's default per header) allow
	// themselves, and room for a binary-mode reply whose ce- headers carry a large event.
	MaxResponseHeaderBytes = h1.MaxResponseHeaderBytes
	// MaxResponseHeaderFields bounds the header fields of a response head: room for a
	// binary-mode reply with the 400 attributes the ingress accepts and HTTP's own
	// headers besides.
	MaxResponseHeaderFields = h1.MaxResponseHeaderFields
)

// ErrResponseHeadTooLarge is the error of an attempt whose response head passed
// MaxResponseHeaderBytes or MaxResponseHeaderFields.
var ErrResponseHeadTooLarge = h1.ErrResponseHeadTooLarge

// transport is NewClient's http.RoundTripper: Sluice's HTTP/1.1 transport for http://
// subscribers (package h1, net/http's for the rest), and the deny-list its dialer
// enforces, which the clients of a Target's CACerts get too.
type transport struct {
	*h1.Transport
	deny DenyList
}

// untilRoundTripper is a transport that takes a request's deadline and header fields
// apart from the request (h1.Transport.RoundTripUntil), so an attempt costs no context,
// timer or header map of its own.
type untilRoundTripper interface {
	RoundTripUntil(ctx context.Context, req *http.Request, header func(yield func(name, value string)), dl time.Time) (*http.Response, error)
}

// CloseIdleTo closes c's idle connections to rawURL's host and port: the broker calls it
// when a trigger is retired, so that a subscriber nobody delivers to any more holds no
// connection until the idle timeout. With a client whose transport cannot close one
// host's connections (not NewClient's) it closes all of c's idle connections instead.
func CloseIdleTo(c *http.Client, rawURL string) {
	if t, ok := c.Transport.(interface{ CloseIdleTo(rawURL string) }); ok {
		t.CloseIdleTo(rawURL)
		return
	}
	c.CloseIdleConnections()
}
