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
// attributes. It is safe for concurrent use.
type Logger struct {
	l     *slog.Logger
	every time.Duration
	level slog.Level

	mu    sync.Mutex
	kinds map[string]*kind
}

// kind is the state of one kind of warning.
type kind struct {
	last    time.Time // when one was last logged
	hushed  int       // held back since
	msg     string    // the last one held back
	args    []any
	pending bool // a summary is scheduled
}

// New returns a Logger writing warnings to l.
func New(l *slog.Logger) *Logger { return NewLevel(l, slog.LevelWarn) }

// NewLevel returns a Logger writing to l at level: Warn logs at that level.
func NewLevel(l *slog.Logger, level slog.Level) *Logger {
	return &Logger{l: l, every: Every, level: level, kinds: map[string]*kind{}}
}

// Warn logs msg with args unless a warning of the same kind was logged in the last
// Every; those held back are counted in a summary line at the end of the period.
func (r *Logger) Warn(kindName, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	k := r.kinds[kindName]
	if k == nil {
		k = &kind{}
		r.kinds[kindName] = k
	}
	if !k.last.IsZero() && now.Sub(k.last) < r.every {
		k.hushed++
		k.msg, k.args = msg, args
		if !k.pending {
			k.pending = true
			time.AfterFunc(k.last.Add(r.every).Sub(now), func() { r.summarize(kindName) })
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
	k := r.kinds[kindName]
	n, msg, args := k.hushed, k.msg, k.args
	k.hushed, k.msg, k.args, k.pending = 0, "", nil, false
	r.mu.Unlock()
	if n == 0 {
		return
	}
	args = append(args[:len(args):len(args)], "suppressed", n)
	r.l.Log(context.Background(), r.level, fmt.Sprintf("%s (%d more like this in the last %s)", msg, n, r.every), args...)
}
