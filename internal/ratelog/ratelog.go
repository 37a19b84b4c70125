// Package ratelog logs repeating warnings at most once per period per kind, with the
// count of those held back: a backend that is down, or a flood of refused requests,
// logs two lines every ten seconds (the first of the period, then a summary of the
// others), not one per request.
package ratelog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Every is how often one kind of warning is logged while it repeats.
const Every = 10 * time.Second

// Logger logs each kind of warning at most once per Every: the first of a period at
// once, and, if more came in that period, one summary line at its end, "(N more like
// this in the last 10s)" with suppressed=N, carrying the last one's message and
// attributes. Close it when done with it: it stops the summaries' timers and writes
// the pending summaries. It is safe for concurrent use.
type Logger struct {
	l         *slog.Logger
	every     time.Duration
	level     slog.Level
	now       func() time.Time
	afterFunc func(time.Duration, func()) stopper // schedules a summary

	mu     sync.Mutex
	kinds  map[string]*kind
	closed bool // no summary is scheduled any more
}

// stopper is a scheduled summary (a *time.Timer).
type stopper interface{ Stop() bool }

// kind is the state of one kind of warning.
type kind struct {
	last    time.Time // when one was last logged
	hushed  int       // held back since
	msg     string    // the last one held back
	args    []any
	pending stopper // the summary scheduled; nil when none
}

// New returns a Logger writing warnings to l.
func New(l *slog.Logger) *Logger { return newLevel(l, slog.LevelWarn) }

// newLevel returns a Logger writing to l at level: Warn logs at that level.
func newLevel(l *slog.Logger, level slog.Level) *Logger {
	return &Logger{l: l, every: Every, level: level, now: time.Now,
		afterFunc: func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) },
		kinds:     map[string]*kind{}}
}

// Warn logs msg with args unless a warning of the same kind was logged in the last
// Every; those held back are counted in a summary line at the end of the period (or
// at Close, whichever comes first; after Close they are only counted).
func (r *Logger) Warn(kindName, msg string, args ...any) {
	now := r.now()
	r.mu.Lock()
	k := r.kinds[kindName]
	if k == nil {
		k = &kind{}
		r.kinds[kindName] = k
	}
	if !k.last.IsZero() && now.Sub(k.last) < r.every {
		k.hushed++
		k.msg, k.args = msg, args
		if k.pending == nil && !r.closed {
			k.pending = r.afterFunc(k.last.Add(r.every).Sub(now), func() { r.summarize(kindName) })
		}
		r.mu.Unlock()
		return
	}
	k.last = now
	r.mu.Unlock()
	r.l.Log(context.Background(), r.level, msg, args...)
}

// summarize logs the count of kindName's warnings held back in the period that ended.
func (r *Logger) summarize(kindName string) {
	r.mu.Lock()
	n, msg, args := r.takeHushed(r.kinds[kindName])
	r.mu.Unlock()
	r.logSummary(n, msg, args)
}

// Close stops the scheduled summaries and writes them at once. Warnings after Close
// are still logged at most once per Every, but the others are not summarized.
func (r *Logger) Close() {
	type summary struct {
		n    int
		msg  string
		args []any
	}
	var out []summary
	r.mu.Lock()
	r.closed = true
	for _, k := range r.kinds {
		if k.pending == nil {
			continue
		}
		k.pending.Stop()
		n, msg, args := r.takeHushed(k)
		out = append(out, summary{n, msg, args})
	}
	r.mu.Unlock()
	for _, s := range out {
		r.logSummary(s.n, s.msg, s.args)
	}
}

// takeHushed returns and clears k's held-back count, message and attributes. r.mu is
// held.
func (r *Logger) takeHushed(k *kind) (int, string, []any) {
	n, msg, args := k.hushed, k.msg, k.args
	k.hushed, k.msg, k.args, k.pending = 0, "", nil, nil
	return n, msg, args
}

// logSummary logs the count n of warnings held back, with the last one's msg and args.
func (r *Logger) logSummary(n int, msg string, args []any) {
	if n == 0 {
		return
	}
	args = append(args[:len(args):len(args)], "suppressed", n)
	r.l.Log(context.Background(), r.level, fmt.Sprintf("%s (%d more like this in the last %s)", msg, n, r.every), args...)
}
