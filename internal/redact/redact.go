// Package redact hides the credentials of URLs that Sluice shows: in logs, GET /status,
// GET /ui/snapshot.json, trace spans and the knativeerrordest extension of dead letters.
// Events are still sent to the real URL; only what is shown is redacted.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every credential redacted: the same text as net/url's URL.Redacted.
const Mask = "xxxxx"

// URL returns s with its credentials replaced by Mask: the password of the userinfo
// (a userinfo with no password, often a token, is replaced whole) and the value of
// every query parameter whose name looks secret (isSecret). Text that does not parse as
// a URL is replaced whole by Mask unless it holds neither '@' nor '?'.
func URL(s string) string {
	if !strings.ContainsAny(s, "@?") {
		return s // nothing to hide: no userinfo, no query
	}
	u, err := url.Parse(s)
	if err != nil {
		return Mask
	}
	return Of(u)
}

// urlInText is what Text takes for a URL: a scheme, "://", and what follows up to a
// space, a quote or an angle bracket.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>]+")

// Text returns s with every URL in it (scheme://…, up to a space or a quote) redacted
// as URL does: for free text that may quote a URL, such as the reason an object is
// not ready.
func Text(s string) string {
	if !strings.Contains(s, "://") || !strings.ContainsAny(s, "@?") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, URL)
}

// Of returns u as a string with its credentials replaced by Mask; see URL. u is not
// changed.
func Of(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.User == nil && u.RawQuery == "" {
		return u.String()
	}
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), Mask)
		} else {
			c.User = url.User(Mask)
		}
	}
	c.RawQuery = redactQuery(c.RawQuery)
	return c.String()
}

// redactQuery returns the raw query q with the value of each parameter whose name looks
// secret (isSecret) replaced by Mask, keeping the parameters' order.
func redactQuery(q string) string {
	if q == "" {
		return q
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if hasValue && isSecret(name) {
			parts[i] = url.QueryEscape(name) + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

// secretWords are the parts of a parameter name, lower-cased without '-' and '_', that
// make it secret.
var secretWords = []string{"token", "key", "secret", "pass", "pwd", "signature", "credential", "auth", "session", "jwt"}

// isSecret reports whether a query parameter of this name holds a credential: its name,
// lower-cased without '-' and '_', is "sig" or "code" or contains token, key, secret,
// pass, pwd, signature, credential, auth, session or jwt (access_token, apikey,
// X-Amz-Signature, X-Amz-Credential, password…).
func isSecret(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
	if n == "sig" || n == "code" {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
