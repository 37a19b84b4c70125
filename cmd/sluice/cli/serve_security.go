package cli

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/auth"
	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/httpserver"
	"github.com/sluice-broker/sluice/internal/ratelog"
	"github.com/sluice-broker/sluice/source/ping"
)

// securityFlags are serve's flags for TLS, the HTTP server's limits and sender
// identity (docs/security.md).
type securityFlags struct {
	tlsCert, tlsKey, tlsClientCA string
	requireClientCert            bool
	plainAddr                    string
	readHeaderTimeout            time.Duration
	readTimeout, writeTimeout    time.Duration
	idleTimeout                  time.Duration
	maxHeaderBytes               int
	maxConns                     int
	maxInflightBody              int64 // --max-inflight-body-bytes (serve.go), or --memory-limit
	leanHTTP1                    bool
	nsMemoryShare                float64
	opsTokenFile                 string
	auth                         authFlags
}

func (f *securityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain); reloaded when the file changes")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the PEM private key of --tls-cert; reloaded when the file changes")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "verify client certificates against these PEM CAs (mutual TLS); a certificate's subject CN is the sender's identity")
	fl.BoolVar(&f.requireClientCert, "tls-require-client-cert", false, "with --tls-client-ca: refuse clients without a valid certificate at the handshake")
	fl.StringVar(&f.plainAddr, "plain-addr", "", "also listen here over plain HTTP for /healthz, /readyz and /metrics only (with --tls-cert)")
	fl.DurationVar(&f.readHeaderTimeout, "read-header-timeout", httpserver.DefaultReadHeaderTimeout, "bound on the TLS handshake and a request's headers (slow clients are cut off)")
	fl.DurationVar(&f.readTimeout, "read-timeout", httpserver.DefaultReadTimeout, "bound on reading a whole request, body included")
	fl.DurationVar(&f.writeTimeout, "write-timeout", httpserver.DefaultWriteTimeout, "bound from a request's headers to the end of its response (clients that do not read are cut off)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", httpserver.DefaultIdleTimeout, "close keep-alive connections idle this long")
	fl.IntVar(&f.maxHeaderBytes, "max-header-bytes", httpserver.DefaultMaxHeaderBytes, "largest request header block; larger get 431")
	fl.IntVar(&f.maxConns, "max-conns", httpserver.DefaultMaxConns, "connections served at once; more wait to be accepted")
	fl.BoolVar(&f.leanHTTP1, "lean-http1", true, "serve plain HTTP/1.1 POSTs on the lean path (docs/overload.md); false: net/http serves every request")
	fl.Float64Var(&f.nsMemoryShare, "namespace-memory-share", 1, "fraction of --memory-limit the memory channels of one namespace may hold together (1: no per-namespace bound)")
	fl.StringVar(&f.opsTokenFile, "ops-token-file", "", "require the token in this file (Authorization: Bearer, or a Basic password) on /metrics, /status, /ui, /debug/pprof/ and /triggers/ (pause, resume); /healthz and /readyz stay open")
	f.auth.register(fl)
}

// serverOptions are the HTTP server's options from the flags.
func (f *securityFlags) serverOptions(log *slog.Logger, warn *ratelog.Logger) []httpserver.Option {
	opts := []httpserver.Option{
		httpserver.WithReadHeaderTimeout(f.readHeaderTimeout),
		httpserver.WithReadTimeout(f.readTimeout),
		httpserver.WithWriteTimeout(f.writeTimeout),
		httpserver.WithIdleTimeout(f.idleTimeout),
		httpserver.WithMaxHeaderBytes(f.maxHeaderBytes),
		httpserver.WithMaxConns(f.maxConns),
		httpserver.WithLeanHTTP1(f.leanHTTP1),
		// Every handler served here (the ingress, probes, /status, /metrics, pprof, the
		// dashboard, the authorizer) is done with its request when it returns; the
		// broker's admission waits inside the handler (docs/overload.md).
		httpserver.WithRequestReuse(true),
		// Failed TLS handshakes are logged at most once per ratelog.Every, with a count.
		httpserver.WithErrorLog(stdlog.New(newServerErrorLog(log, warn), "", 0)),
	}
	if f.maxInflightBody > 0 {
		opts = append(opts, httpserver.WithMaxInflightBodyBytes(f.maxInflightBody))
	}
	if f.tlsCert != "" || f.tlsKey != "" {
		opts = append(opts, httpserver.WithTLS(f.tlsCert, f.tlsKey))
	}
	if f.tlsClientCA != "" {
		opts = append(opts, httpserver.WithClientCA(f.tlsClientCA, f.requireClientCert))
	}
	return opts
}

// check rejects flag combinations that mean nothing; changed reports whether a flag was
// given.
func (f *securityFlags) check(changed func(string) bool) error {
	switch {
	case f.plainAddr != "" && f.tlsCert == "":
		return errors.New("--plain-addr: only with --tls-cert (without TLS the main port is plain already)")
	case f.requireClientCert && f.tlsClientCA == "":
		return errors.New("--tls-require-client-cert: needs --tls-client-ca")
	case changed("auth-default") && f.auth.issuer == "" && f.tlsClientCA == "":
		return errors.New("--auth-default: needs --oidc-issuer or --tls-client-ca (without a sender identity everyone may send)")
	}
	if f.opsTokenFile != "" {
		if _, err := readOpsToken(f.opsTokenFile); err != nil {
			return err
		}
	}
	return f.auth.check()
}

// guardOps puts the operator endpoints of handler behind --ops-token-file's token
// (opsGuard), logging refusals to warn; without the flag it returns handler.
func (f *securityFlags) guardOps(handler http.Handler, warn *ratelog.Logger) (http.Handler, error) {
	if f.opsTokenFile == "" {
		return handler, nil
	}
	tok, err := readOpsToken(f.opsTokenFile)
	if err != nil {
		return nil, err
	}
	return opsGuard(handler, tok, warn), nil
}

// plainOnly serves only the health probes and the metrics of the full handler: the plain
// port of a TLS server, for probes and scrapers that do not speak TLS. Everything else
// is 404, so no event enters without TLS.
func plainOnly(full http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			full.ServeHTTP(w, r)
		default:
			http.Error(w, "this port serves /healthz, /readyz and /metrics only; send events over HTTPS", http.StatusNotFound)
		}
	})
}

// scheme is the ingress's URL scheme: https with --tls-cert.
func (f *securityFlags) scheme() string {
	if f.tlsCert != "" {
		return "https"
	}
	return "http"
}

// ingressBaseURL is the URL of the listener at addr, with the scheme it serves: the
// base of refs to the configuration's own brokers and of the printed ingest URLs.
func ingressBaseURL(scheme, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// servers returns the HTTP server on ln and, with --plain-addr, the plain one for probes
// and metrics. connContext gives each connection of the main server's lean path its
// context (the broker's admission turn, httpserver.WithConnContext).
func (f *securityFlags) servers(ln net.Listener, handler http.Handler, connContext func(context.Context) (context.Context, func()), log *slog.Logger, warn *ratelog.Logger) (main, plain *httpserver.Server, err error) {
	opts := f.serverOptions(log, warn)
	if main, err = httpserver.New(ln, handler, append(opts[:len(opts):len(opts)], httpserver.WithConnContext(connContext))...); err != nil {
		return nil, nil, err
	}
	if f.plainAddr == "" {
		return main, nil, nil
	}
	pln, err := net.Listen("tcp", f.plainAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("--plain-addr %s: %w", f.plainAddr, err)
	}
	plainOpts := append(opts[:len(opts):len(opts)], httpserver.WithTLS("", ""), httpserver.WithClientCA("", false))
	if plain, err = httpserver.New(pln, plainOnly(handler), plainOpts...); err != nil {
		pln.Close()
		return nil, nil, err
	}
	log.Info("plain HTTP for probes and metrics only", "addr", pln.Addr().String())
	return main, plain, nil
}

// brokerOptions are the broker's options for sender identity and outbound tokens, and
// the PingSources' options. With sender identity on, Sluice's own sends to origin (its
// ingress: deliveries, replies, PingSources) carry the sending object's internal
// identity (auth.Internal).
func (f *securityFlags) brokerOptions(ctx context.Context, origin string) ([]broker.Option, []ping.Option, error) {
	var opts []broker.Option
	var pingOpts []ping.Option
	in, err := auth.NewInternal()
	if err != nil {
		return nil, nil, err
	}
	authz, err := f.auth.authorizer(ctx, f.tlsClientCA != "", in)
	if err != nil {
		return nil, nil, err
	}
	if authz != nil {
		opts = append(opts, broker.WithAuthorizer(authz), broker.WithInternalIdentity(origin, in))
		pingOpts = append(pingOpts, ping.WithOwnIngress(origin, func(src config.PingSource) string {
			_, h := in.Sender("PingSource", src.Namespace, src.Name)
			return h
		}))
	}
	tokens, err := auth.NewTokenFiles(f.auth.tokens)
	if err != nil {
		return nil, nil, err
	}
	if tokens != nil {
		opts = append(opts, broker.WithTokenSource(tokens))
	}
	return opts, pingOpts, nil
}
