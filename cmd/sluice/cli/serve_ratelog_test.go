package cli

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeWritesPendingRefusalCounts: refusals held back from the log are counted in a
// summary line by the time serve returns, not by a timer left behind it.
func TestServeWritesPendingRefusalCounts(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	file := filepath.Join(t.TempDir(), "ops-token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s *served
	t.Run("serve", func(t *testing.T) { // its cleanup stops serve and waits for it
		s = startServe(t, "", "--ops-token-file", file)
		for range 3 {
			if code, _ := get(t, &http.Client{}, s.base+"/metrics", ""); code != http.StatusUnauthorized {
				t.Fatalf("GET /metrics without the token: %d", code)
			}
		}
	})
	if want := "operator endpoint refused (2 more like this in the last 10s)"; !strings.Contains(s.log.String(), want) {
		t.Fatalf("serve returned without the summary %q:\n%s", want, s.log.String())
	}
}
