// Package ratelog logs repeating warnings at most once per period per kind, with the
// count of those held back: a backend that is down logs one line every ten seconds, not
// one per request.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// Every is how often one kind of warning is logged while it repeats.
const Every = 10 * time.Second

// Logger logs each kind of warning at most once per Every. It is safe for concurrent use.
type Logger struct {
	l    *slog.Logger
	mu   sync.Mutex
	last map[string]time.Time
	hush map[string]int
}

// New returns a Logger writing to l.
func New(l *slog.Logger) *Logger {
	return &Logger{l: l, last: map[string]time.Time{}, hush: map[string]int{}}
}

// Warn logs msg with args unless a warning of the same kind was logged in the last Every;
// the line that is logged says how many were suppressed since the last one.
func (r *Logger) Warn(kind, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.last[kind]) < Every {
		r.hush[kind]++
		r.mu.Unlock()
		return
	}
	r.last[kind] = now
	n := r.hush[kind]
	r.hush[kind] = 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	r.l.Warn(msg, args...)
}
