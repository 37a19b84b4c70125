package cli

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"unicode"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/internal/ratelog"
	"github.com/sluice-broker/sluice/ui"
)

// minOpsToken is the shortest --ops-token-file token accepted.
const minOpsToken = 16

// readOpsToken reads the operator token of --ops-token-file: one line of at least
// minOpsToken printable characters without spaces.
func readOpsToken(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--ops-token-file: %w", err)
	}
	tok := string(bytes.TrimSpace(data))
	switch {
	case len(tok) < minOpsToken:
		return "", fmt.Errorf("--ops-token-file %s: the token has %d characters; want at least %d (for example: openssl rand -hex 32)", file, len(tok), minOpsToken)
	case strings.IndexFunc(tok, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return "", fmt.Errorf("--ops-token-file %s: the token must be one line of printable characters without spaces", file)
	}
	return tok, nil
}

// isOpsPath reports whether path is an operator endpoint, which --ops-token-file
// guards: /metrics, /status, the dashboard, the profiler and the pause and resume of
// triggers (broker.TriggersPath). The probes /healthz and
// /readyz are not.
func isOpsPath(path string) bool {
	return path == "/metrics" || path == "/status" || ui.Handles(path) || strings.HasPrefix(path, "/debug/pprof/") ||
		broker.IsTriggerPath(path)
}

// opsGuard answers 401 to a request for an operator endpoint (isOpsPath) that does not
// carry token: as "Authorization: Bearer <token>", or as the password of HTTP Basic
// authentication (any user name), which a browser asks for on /ui. Other paths go to
// next untouched. Refusals are logged to refused: at most once per ratelog.Every, with
// a count.
func opsGuard(next http.Handler, token string, refused *ratelog.Logger) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isOpsPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		var got string
		if _, pw, ok := r.BasicAuth(); ok {
			got = pw
		} else if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			got = strings.TrimSpace(h[7:])
		}
		if got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		reason := "missing operator token"
		if got != "" {
			reason = "wrong operator token"
		}
		refused.Warn("ops_unauthorized", "operator endpoint refused", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", reason)
		w.Header().Add("WWW-Authenticate", `Bearer realm="sluice-ops"`)
		w.Header().Add("WWW-Authenticate", `Basic realm="sluice-ops"`)
		http.Error(w, r.URL.Path+": "+reason+" (Authorization: Bearer, --ops-token-file)", http.StatusUnauthorized)
	})
}

// opsClient is an HTTP client for the operator endpoints of a running sluice serve
// (sluice status, sluice top): with tokenFile, it sends its token as a bearer token.
func opsClient(c *http.Client, tokenFile string) (*http.Client, error) {
	if tokenFile == "" {
		return c, nil
	}
	tok, err := readOpsToken(tokenFile)
	if err != nil {
		return nil, err
	}
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = bearerTransport{base: base, authz: "Bearer " + tok}
	return c, nil
}

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct {
	base  http.RoundTripper
	authz string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.authz)
	return t.base.RoundTrip(r)
}

// serverErrorLog is the writer of the HTTP server's error log (http.Server.ErrorLog):
// failed TLS handshakes, which anyone who can reach the port can cause, are logged at
// most once per ratelog.Every with a count of the others; every other line is logged
// as a warning.
type serverErrorLog struct {
	log       *slog.Logger
	handshake *ratelog.Logger
}

func newServerErrorLog(log *slog.Logger, handshake *ratelog.Logger) *serverErrorLog {
	return &serverErrorLog{log: log, handshake: handshake}
}

func (s *serverErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if strings.Contains(line, "TLS handshake error") {
		s.handshake.Warn("tls_handshake", "TLS handshake failed", "err", line)
	} else if line != "" {
		s.log.Warn(line)
	}
	return len(p), nil
}
