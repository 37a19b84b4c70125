package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// TokenSource gives the OIDC token to send to a destination that names an audience (a
// Knative Destination's audience field), as Authorization: Bearer. Package auth's
// TokenFiles is Sluice's.
type TokenSource interface {
	// Token returns the token for audience. The error must not hold a token.
	Token(ctx context.Context, audience string) (string, error)
}

// WithTokenSource sets where tokens for destinations with an audience come from; a
// destination whose audience it has no token for fails its delivery (retried, then
// dead-lettered) saying so. Default: none, and audiences are ignored: no token is sent,
// as Knative's dispatcher sends none while its authentication-oidc feature is off.
func WithTokenSource(ts TokenSource) Option { return func(d *Dispatcher) { d.tokens = ts } }

// WithOwnIngress makes the dispatcher send authorization (the sending object's identity,
// package auth's Internal) as the Authorization header to every destination at origin
// ("scheme://host:port": Sluice's own ingress) that no token of a TokenSource is sent
// to: its subscriber, reply URL and dead-letter sink alike. Default: none.
func WithOwnIngress(origin, authorization string) Option {
	return func(d *Dispatcher) {
		if u, err := url.Parse(origin); err == nil && u.Host != "" {
			d.own = ownIngress{scheme: u.Scheme, host: u.Host, authz: authorization}
		}
	}
}

// ownIngress is WithOwnIngress's setting.
type ownIngress struct {
	scheme, host, authz string
}

// at reports whether u is at Sluice's own ingress.
func (o *ownIngress) at(u *url.URL) bool {
	return o.authz != "" && u != nil && u.Host == o.host && u.Scheme == o.scheme
}

// caClient returns a client for https destinations verified against the PEM CA
// certificates caPEM (a Destination's CACerts) instead of the system's: TLS 1.2 at
// least, HTTP/2 when the destination offers it, HTTP/1.1 otherwise, and deny (the
// dispatcher's client's deny-list) checked on every dial. Like NewClient's, it follows
// no redirects and bounds response heads.
func caClient(caPEM string, deny DenyList) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return nil, errors.New("CACerts: no PEM certificate in it")
	}
	t := newHTTPTransport(clientConfig{deny: deny}.dialer(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	return &http.Client{Transport: t, CheckRedirect: noRedirects}, nil
}

// clientFor is c when set (a destination with its own CACerts), else the dispatcher's.
func (d *Dispatcher) clientFor(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return d.client
}

// bearer returns the Authorization header value for a destination with audience; ""
// without one, or without a token source. When the source has no token, the error names
// only the audience: it becomes a dead letter's knativeerrordata, which the sink's owner
// reads. The source's own error (it may name a token file) goes to the log instead, at
// most once per ratelog.Every per audience (docs/security.md).
//
// A destination at Sluice's own ingress (WithOwnIngress) without a token of the source
// gets the sending object's internal identity.
func (d *Dispatcher) bearer(ctx context.Context, audience string, u *url.URL) (string, error) {
	if audience == "" || d.tokens == nil {
		if d.own.at(u) {
			return d.own.authz, nil
		}
		return "", nil
	}
	tok, err := d.tokens.Token(ctx, audience)
	if err != nil {
		d.warn.Warn("token "+audience, "no token for a destination's audience", "audience", audience, "err", err)
		return "", fmt.Errorf("no token for audience %q", audience)
	}
	return "Bearer " + tok, nil
}

// closeIdle closes the idle connections of the target's own clients.
func (r *resolved) closeIdle() {
	for _, c := range []*http.Client{r.subClient, r.dlsClient} {
		if c != nil {
			c.CloseIdleConnections()
		}
	}
}
