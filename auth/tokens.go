package auth

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenFiles are the tokens Sluice sends to destinations that name an audience (a
// Destination's audience field), as Knative's dispatcher sends one it requested for that
// audience: one file per audience, holding the token (a JWT, as Kubernetes projects a
// service account token). A file is re-read when it changes (checked at most once a
// second), so a token refreshed on disk is picked up. It implements
// delivery.TokenSource. Safe for concurrent use.
type TokenFiles struct {
	files map[string]string // audience → file

	mu     sync.Mutex
	tokens map[string]cachedToken
}

type cachedToken struct {
	token   string
	mod     time.Time
	checked time.Time
}

// NewTokenFiles parses AUDIENCE=FILE entries (the --oidc-token flag). It returns nil for
// no entries.
func NewTokenFiles(entries []string) (*TokenFiles, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	t := &TokenFiles{files: map[string]string{}, tokens: map[string]cachedToken{}}
	for _, e := range entries {
		aud, file, ok := strings.Cut(e, "=")
		if !ok || aud == "" || file == "" {
			return nil, fmt.Errorf("--oidc-token %q: want AUDIENCE=FILE", e)
		}
		if _, dup := t.files[aud]; dup {
			return nil, fmt.Errorf("--oidc-token: audience %q given twice", aud)
		}
		t.files[aud] = file
	}
	return t, nil
}

// Token returns the token for audience. The error names the audience and the file, never
// the token.
func (t *TokenFiles) Token(_ context.Context, audience string) (string, error) {
	file, ok := t.files[audience]
	if !ok {
		return "", fmt.Errorf("no token for audience %q (give --oidc-token %s=FILE)", audience, audience)
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.tokens[audience]
	if c.token != "" && now.Sub(c.checked) < time.Second {
		return c.token, nil
	}
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("token for audience %q: %w", audience, err)
	}
	c.checked = now
	if c.token == "" || !fi.ModTime().Equal(c.mod) {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("token for audience %q: %w", audience, err)
		}
		tok := string(bytes.TrimSpace(data))
		if tok == "" {
			return "", fmt.Errorf("token for audience %q: %s is empty", audience, file)
		}
		c.token, c.mod = tok, fi.ModTime()
	}
	t.tokens[audience] = c
	return c.token, nil
}
