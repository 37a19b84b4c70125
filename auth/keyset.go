package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// MinRefetch is the least time between two fetches of a remote JWKS: a token whose key
// is unknown makes Sluice fetch the key set again (the issuer may have rotated its
// keys), at most once per MinRefetch whatever the number of such tokens.
const MinRefetch = 10 * time.Second

// maxJWKSBytes bounds a fetched JWKS document.
const maxJWKSBytes = 1 << 20

// FetchTimeout bounds one fetch of the issuer's key set or discovery document when
// KeySource.Client is nil.
const FetchTimeout = 10 * time.Second

// remoteKeys is the key set at a JWKS URL, an oidc.KeySet. Unlike go-oidc's
// RemoteKeySet, which fetches the set again for every token naming an unknown key, it
// fetches at most once per MinRefetch: a sender cannot make Sluice fetch the set once
// per request. Safe for concurrent use.
type remoteKeys struct {
	url    string
	client *http.Client
	ctx    context.Context // bounds every fetch: the verifier's life
	algs   []jose.SignatureAlgorithm
	every  time.Duration
	now    func() time.Time

	mu       sync.Mutex // guards keys, fetched and inflight
	keys     []jose.JSONWebKey
	fetched  time.Time // when the last fetch began; zero before the first
	inflight *flight   // the fetch under way (one at a time); nil when none
}

// flight is one fetch of the key set: done is closed when it ends, err then says how.
type flight struct {
	done chan struct{}
	err  error
}

func newRemoteKeys(ctx context.Context, jwksURL string, client *http.Client, now func() time.Time) *remoteKeys {
	algs := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	if client == nil {
		client = &http.Client{Timeout: FetchTimeout}
	}
	return &remoteKeys{url: jwksURL, client: client, ctx: ctx, algs: algs, every: MinRefetch, now: now}
}

// VerifySignature verifies raw's signature with a key of the set and returns its
// payload. A token whose key the set lacks makes it fetch the set again, unless it
// was fetched less than MinRefetch ago.
// A fetch runs apart from the request (bounded by the verifier's context and the
// client's timeout): the request waits for it only until ctx ends.
func (k *remoteKeys) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, k.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	kid := ""
	if len(jws.Signatures) > 0 {
		kid = jws.Signatures[0].Header.KeyID
	}
	asked := k.now()
	if p, ok := k.verify(jws, kid); ok {
		return p, nil
	}
	fetched, err := k.refresh(ctx, asked)
	if err != nil {
		return nil, err
	}
	if fetched {
		if p, ok := k.verify(jws, kid); ok {
			return p, nil
		}
	}
	if kid != "" {
		return nil, fmt.Errorf("no key %q in the issuer's key set", kid)
	}
	return nil, errors.New("no key of the issuer's key set verifies the token")
}

// verify tries the keys of the set that kid names (every key when kid is empty).
func (k *remoteKeys) verify(jws *jose.JSONWebSignature, kid string) ([]byte, bool) {
	k.mu.Lock()
	keys := k.keys
	k.mu.Unlock()
	for i := range keys {
		if kid == "" || keys[i].KeyID == kid {
			if p, err := jws.Verify(&keys[i]); err == nil {
				return p, true
			}
		}
	}
	return nil, false
}

// refresh fetches the set again, unless a fetch began after asked (its keys are the
// newest) or less than every before now. It reports whether the keys may have changed
// since asked. It waits for a fetch under way, or the one it starts, until ctx ends.
func (k *remoteKeys) refresh(ctx context.Context, asked time.Time) (bool, error) {
	for {
		k.mu.Lock()
		if f := k.inflight; f != nil {
			k.mu.Unlock()
			select {
			case <-f.done:
				continue // look again: that fetch may have begun before asked
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		now := k.now()
		last := k.fetched
		switch {
		case last.After(asked):
			k.mu.Unlock()
			return true, nil // fetched while this token waited
		case !last.IsZero() && now.Sub(last) < k.every:
			k.mu.Unlock()
			return false, nil
		}
		k.fetched = now
		f := &flight{done: make(chan struct{})}
		k.inflight = f
		k.mu.Unlock()
		go k.run(f)
		select {
		case <-f.done:
			return f.err == nil, f.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// run fetches the set for flight f, keeps the keys it got and ends f.
func (k *remoteKeys) run(f *flight) {
	keys, err := k.fetch()
	k.mu.Lock()
	if err == nil {
		k.keys = keys
	}
	k.inflight = nil
	f.err = err
	k.mu.Unlock()
	close(f.done)
}

// fetch GETs the key set.
func (k *remoteKeys) fetch() ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(k.ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the issuer's keys: %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("fetching the issuer's keys: the key set is larger than %d bytes", maxJWKSBytes)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("fetching the issuer's keys: not a JWKS: %w", err)
	}
	return set.Keys, nil
}

// checkHTTPS refuses a plain-HTTP URL for the issuer's keys or discovery unless
// allowHTTP: anyone on the path could substitute the keys. flag names the setting.
func checkHTTPS(flag, raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s %q: not a URL: %w", flag, raw, err)
	}
	switch {
	case u.Scheme == "https" && u.Host != "":
		return nil
	case u.Scheme == "http" && u.Host != "":
		if allowHTTP {
			return nil
		}
		return fmt.Errorf("%s %s: plain HTTP lets anyone on the path substitute the issuer's keys; use https, or give --oidc-allow-http (tests, local setups)", flag, raw)
	}
	return fmt.Errorf("%s %q: want an absolute https URL", flag, raw)
}
