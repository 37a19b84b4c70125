package ratelog

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// fakeClock is a clock the test moves, with the summaries it schedules.
type fakeClock struct {
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at            time.Time
	f             func()
	stopped, done bool
}

func (t *fakeTimer) Stop() bool {
	was := !t.stopped && !t.done
	t.stopped = true
	return was
}

func (c *fakeClock) afterFunc(d time.Duration, f func()) stopper {
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// advance moves the clock by d and runs the summaries then due.
func (c *fakeClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.stopped && !t.done && !t.at.After(c.now) {
			t.done = true
			t.f()
		}
	}
}

// live counts the summaries scheduled and neither run nor stopped.
func (c *fakeClock) live() int {
	n := 0
	for _, t := range c.timers {
		if !t.stopped && !t.done {
			n++
		}
	}
	return n
}

// newFake returns a Logger writing to buf on clock c, with a period of one second.
func newFake(buf *syncbuf.Buffer, c *fakeClock) *Logger {
	r := New(slog.New(slog.NewTextHandler(buf, nil)))
	r.every = time.Second
	r.now = func() time.Time { return c.now }
	r.afterFunc = c.afterFunc
	return r
}

func lines(buf *syncbuf.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

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
			c := &fakeClock{now: time.Unix(1e9, 0)}
			r := newFake(&buf, c)
			for range tc.a {
				r.Warn("a", "backend a down", "err", "refused")
				c.advance(time.Millisecond / 2)
			}
			r.Warn("b", "backend b down")
			if n := len(lines(&buf)); n != 2 {
				t.Fatalf("within the period, %d lines, want 2 (the first of each kind): %q", n, lines(&buf))
			}
			c.advance(time.Second) // the period is over
			want := tc.lines + 1   // kind b's line
			got := lines(&buf)
			if len(got) != want {
				t.Fatalf("logged %d lines, want %d: %q", len(got), want, got)
			}
			if tc.suffix != "" && !strings.Contains(buf.String(), tc.suffix) {
				t.Fatalf("no summary %q: %q", tc.suffix, got)
			}
			if tc.suffix != "" && !strings.Contains(buf.String(), "err=refused suppressed="+strings.Fields(strings.SplitN(tc.suffix, "(", 2)[1])[0]) {
				t.Fatalf("the summary does not carry the count and the attributes: %q", got)
			}
			r.Warn("a", "backend a down")
			if n := len(lines(&buf)); n != want+1 {
				t.Fatalf("after the period, a warning was not logged at once: %d lines, want %d", n, want+1)
			}
		})
	}
}

// TestCloseWritesPendingSummaries: Close stops the scheduled summaries and writes
// them at once; after Close nothing is scheduled, and no line comes later.
func TestCloseWritesPendingSummaries(t *testing.T) {
	var buf syncbuf.Buffer
	c := &fakeClock{now: time.Unix(1e9, 0)}
	r := newFake(&buf, c)
	for range 3 {
		r.Warn("a", "backend a down", "err", "refused")
		r.Warn("b", "backend b down")
	}
	if n := c.live(); n != 2 {
		t.Fatalf("%d summaries scheduled, want 2", n)
	}
	r.Close()
	if n := c.live(); n != 0 {
		t.Fatalf("after Close, %d summaries still scheduled, want 0", n)
	}
	got := lines(&buf)
	if len(got) != 4 || !strings.Contains(buf.String(), "backend a down (2 more like this in the last 1s)") ||
		!strings.Contains(buf.String(), "backend b down (2 more like this in the last 1s)") {
		t.Fatalf("Close did not write the pending summaries: %q", got)
	}
	r.Warn("a", "backend a down")
	if n := c.live(); n != 0 {
		t.Fatalf("a warning after Close scheduled %d summaries, want 0", n)
	}
	c.advance(time.Hour)
	if n := len(lines(&buf)); n != 4 {
		t.Fatalf("after Close, %d lines, want 4: %q", n, lines(&buf))
	}
}
