package auth

import (
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// signingAlgs are the JWS algorithms tokens may be signed with (Kubernetes signs
// service account tokens with RS256 or ES256).
var signingAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}

// maxCached bounds the verified tokens remembered; beyond it one is forgotten at random.
const maxCached = 4096

// Verifier verifies bearer tokens (JWTs) of one issuer with go-oidc: signature against
// the issuer's keys, issuer, expiry. The audience is checked by the caller (it differs
// per broker). A verified token is remembered until it expires, so that a sender reusing
// its token costs one signature check, not one per request. Safe for concurrent use.
type Verifier struct {
	issuer string
	v      *oidc.IDTokenVerifier
	now    func() time.Time

	mu    sync.Mutex
	cache map[string]claims // raw token → what it proved
}

// claims are what a verified token says.
type claims struct {
	subject  string
	audience []string
	expiry   time.Time
}

// KeySource says where a Verifier gets the issuer's public keys: exactly one of JWKSURL
// (fetched with Client, fetched again when a token names an unknown key, at most once
// per MinRefetch), JWKSFile (read once) or neither (OpenID discovery at the issuer's
// /.well-known/openid-configuration, then its jwks_uri as a JWKSURL).
type KeySource struct {
	JWKSURL, JWKSFile string
	// Client fetches the JWKS URL or the discovery document; nil means a client
	// whose fetches time out after FetchTimeout.
	Client *http.Client
	// AllowHTTP accepts plain-HTTP JWKS and discovery URLs (--oidc-allow-http): for
	// tests and local setups only, as anyone on the path could substitute the keys.
	AllowHTTP bool
}

// NewVerifier returns a verifier of issuer's tokens. ctx bounds discovery and the
// verifier's later key fetches: cancel it when the verifier is no longer used.
func NewVerifier(ctx context.Context, issuer string, keys KeySource) (*Verifier, error) {
	if issuer == "" {
		return nil, errors.New("--oidc-issuer: required to verify tokens")
	}
	if keys.JWKSURL != "" && keys.JWKSFile != "" {
		return nil, errors.New("--oidc-jwks-url and --oidc-jwks-file: give one")
	}
	if keys.Client == nil {
		keys.Client = &http.Client{Timeout: FetchTimeout}
	}
	ctx = oidc.ClientContext(ctx, keys.Client)
	out := &Verifier{issuer: issuer, now: time.Now, cache: map[string]claims{}}
	cfg := &oidc.Config{SkipClientIDCheck: true, SupportedSigningAlgs: signingAlgs, Now: func() time.Time { return out.now() }}
	var ks oidc.KeySet
	switch {
	case keys.JWKSURL != "":
		if err := checkHTTPS("--oidc-jwks-url", keys.JWKSURL, keys.AllowHTTP); err != nil {
			return nil, err
		}
		ks = newRemoteKeys(ctx, keys.JWKSURL, keys.Client, func() time.Time { return out.now() })
	case keys.JWKSFile != "":
		pub, err := readJWKS(keys.JWKSFile)
		if err != nil {
			return nil, err
		}
		ks = &oidc.StaticKeySet{PublicKeys: pub}
	default:
		if err := checkHTTPS("--oidc-issuer (discovery)", issuer, keys.AllowHTTP); err != nil {
			return nil, err
		}
		p, err := oidc.NewProvider(ctx, issuer)
		if err != nil {
			return nil, fmt.Errorf("--oidc-issuer %s: discovery (give --oidc-jwks-url or --oidc-jwks-file to skip it): %w", issuer, err)
		}
		var meta struct {
			JWKSURI string `json:"jwks_uri"`
		}
		if err := p.Claims(&meta); err != nil || meta.JWKSURI == "" {
			return nil, fmt.Errorf("--oidc-issuer %s: discovery: no jwks_uri (give --oidc-jwks-url or --oidc-jwks-file)", issuer)
		}
		if err := checkHTTPS("--oidc-issuer's jwks_uri", meta.JWKSURI, keys.AllowHTTP); err != nil {
			return nil, err
		}
		ks = newRemoteKeys(ctx, meta.JWKSURI, keys.Client, func() time.Time { return out.now() })
	}
	out.v = oidc.NewVerifier(issuer, ks, cfg)
	return out, nil
}

// readJWKS reads the public keys of a JWKS file.
func readJWKS(file string) ([]crypto.PublicKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--oidc-jwks-file: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("--oidc-jwks-file %s: not a JWKS: %w", file, err)
	}
	var keys []crypto.PublicKey
	for _, k := range set.Keys {
		if k.IsPublic() {
			keys = append(keys, k.Key)
		} else {
			keys = append(keys, k.Public().Key)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--oidc-jwks-file %s: no keys", file)
	}
	return keys, nil
}

// verify checks raw and returns what it says. The error is one line, safe to show the
// sender; it never holds the token.
func (v *Verifier) verify(ctx context.Context, raw string) (claims, error) {
	now := v.now()
	v.mu.Lock()
	c, ok := v.cache[raw]
	v.mu.Unlock()
	if ok && now.Before(c.expiry) {
		return c, nil
	}
	tok, err := v.v.Verify(ctx, raw)
	if err != nil {
		var exp *oidc.TokenExpiredError
		if errors.As(err, &exp) {
			return claims{}, errors.New("the token expired")
		}
		return claims{}, fmt.Errorf("the token does not verify against issuer %s: %s", v.issuer, oneLine(err.Error()))
	}
	c = claims{subject: tok.Subject, audience: tok.Audience, expiry: tok.Expiry}
	if c.expiry.IsZero() {
		c.expiry = now.Add(time.Minute) // no exp claim: check it again in a minute
	}
	v.mu.Lock()
	if len(v.cache) >= maxCached {
		for k := range v.cache { // map order is random: forget one at random
			delete(v.cache, k)
			break
		}
	}
	v.cache[raw] = c
	v.mu.Unlock()
	return c, nil
}
