package ratelog

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// TestWarnOncePerKindThenSummary: the first warning of a kind is logged at once, the
// others of its period are held back and counted in one summary line at its end, and
// the next one after the period is logged at once again.
func TestWarnOncePerKindThenSummary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a      int // warnings of kind a in one period
		lines  int // lines logged by the end of the period
		suffix string
	}{
		{"one", 1, 1, ""},
		{"five", 5, 2, "backend a down (4 more like this in the last 1s)"},
		{"thousand", 1000, 2, "backend a down (999 more like this in the last 1s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf syncbuf.Buffer
			r := New(slog.New(slog.NewTextHandler(&buf, nil)))
			r.every = time.Second
			start := time.Now()
			for range tc.a {
				r.Warn("a", "backend a down", "err", "refused")
			}
			r.Warn("b", "backend b down")
			lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }
			want := tc.lines + 1 // kind b's line
			deadline := time.Now().Add(20 * time.Second)
			for len(lines()) < want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // any line too many would come by now
			got := lines()
			if len(got) != want {
				t.Fatalf("logged %d lines, want %d: %q", len(got), want, got)
			}
			if tc.suffix != "" && !strings.Contains(buf.String(), tc.suffix) {
				t.Fatalf("no summary %q: %q", tc.suffix, got)
			}
			if tc.suffix != "" && !strings.Contains(buf.String(), "err=refused suppressed="+strings.Fields(strings.SplitN(tc.suffix, "(", 2)[1])[0]) {
				t.Fatalf("the summary does not carry the count and the attributes: %q", got)
			}
			time.Sleep(time.Until(start.Add(r.every))) // the period is over
			r.Warn("a", "backend a down")
			if n := len(lines()); n != want+1 {
				t.Fatalf("after the period, a warning was not logged at once: %d lines, want %d", n, want+1)
			}
		})
	}
}
