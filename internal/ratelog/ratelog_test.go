package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestWarnOncePerKindWithSuppressedCount(t *testing.T) {
	var buf bytes.Buffer
	r := New(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 5 {
		r.Warn("a", "backend a down")
	}
	r.Warn("b", "backend b down")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "backend a down") || !strings.Contains(lines[1], "backend b down") {
		t.Fatalf("logged %q, want one line per kind", lines)
	}
	r.last["a"] = r.last["a"].Add(-Every) // as if Every had passed
	r.Warn("a", "backend a down")
	if !strings.Contains(buf.String(), "suppressed=4") {
		t.Fatalf("the next line of kind a does not count the 4 held back: %q", buf.String())
	}
}
