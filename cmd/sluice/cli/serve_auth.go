package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/auth"
	"github.com/sluice-broker/sluice/internal/tlsfiles"
)

// authFlags are serve's flags for sender identity and EventPolicy (docs/security.md).
type authFlags struct {
	issuer, jwksURL, jwksFile, oidcCA string
	mode                              string
	allowHTTP                         bool
	tokens                            []string // --oidc-token AUDIENCE=FILE
}

func (f *authFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.issuer, "oidc-issuer", "", "verify bearer tokens (JWT) of this issuer; senders then need a token whose audience names the broker (or a client certificate with --tls-client-ca)")
	fl.StringVar(&f.jwksURL, "oidc-jwks-url", "", "the issuer's JWKS URL (default: OpenID discovery at the issuer)")
	fl.StringVar(&f.jwksFile, "oidc-jwks-file", "", "read the issuer's public keys from this JWKS file instead of fetching them")
	fl.StringVar(&f.oidcCA, "oidc-ca", "", "PEM CAs to verify the JWKS URL or discovery endpoint with (default: the system's)")
	fl.BoolVar(&f.allowHTTP, "oidc-allow-http", false, "accept a plain-HTTP --oidc-jwks-url or issuer discovery (tests and local setups only: anyone on the path could substitute the keys)")
	fl.StringVar(&f.mode, "auth-default", string(auth.AllowSameNamespace), "for brokers and channels no EventPolicy names: allow-all, allow-same-namespace or deny-all")
	fl.StringArrayVar(&f.tokens, "oidc-token", nil, "AUDIENCE=FILE: send the token in FILE (re-read when it changes) as Authorization: Bearer to destinations whose audience is AUDIENCE (repeatable)")
}

func (f *authFlags) check() error {
	if _, err := auth.ParseMode(f.mode); err != nil {
		return err
	}
	if f.issuer == "" && (f.jwksURL != "" || f.jwksFile != "" || f.oidcCA != "" || f.allowHTTP) {
		return errors.New("--oidc-jwks-url, --oidc-jwks-file, --oidc-ca and --oidc-allow-http: only with --oidc-issuer")
	}
	_, err := auth.NewTokenFiles(f.tokens)
	return err
}

// authorizer returns the ingress's authorizer, or nil when neither tokens nor client
// certificates identify senders (everyone may send, as before). ctx bounds the
// verifier's key fetches.
func (f *authFlags) authorizer(ctx context.Context, clientCerts bool, internal *auth.Internal) (*auth.Authorizer, error) {
	if f.issuer == "" && !clientCerts {
		return nil, nil
	}
	mode, err := auth.ParseMode(f.mode)
	if err != nil {
		return nil, err
	}
	opts := []auth.Option{auth.WithDefaultMode(mode), auth.WithInternal(internal)}
	if clientCerts {
		opts = append(opts, auth.WithClientCertificates())
	}
	if f.issuer != "" {
		keys := auth.KeySource{JWKSURL: f.jwksURL, JWKSFile: f.jwksFile, AllowHTTP: f.allowHTTP}
		client := &http.Client{Timeout: 10 * time.Second}
		if f.oidcCA != "" {
			pool, err := tlsfiles.LoadCertPool(f.oidcCA)
			if err != nil {
				return nil, errors.Join(errors.New("--oidc-ca"), err)
			}
			client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		}
		keys.Client = client
		v, err := auth.NewVerifier(ctx, f.issuer, keys)
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth.WithVerifier(v))
	}
	return auth.New(opts...)
}
