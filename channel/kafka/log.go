package kafka

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// logEvery is how often one kind of backend error is logged while it repeats.
const logEvery = 10 * time.Second

// rateLog logs each kind of warning at most once per logEvery, with the count of those
// suppressed since. It is safe for concurrent use.
type rateLog struct {
	l    *slog.Logger
	mu   sync.Mutex
	last map[string]time.Time
	hush map[string]int
}

func newRateLog(l *slog.Logger) *rateLog {
	return &rateLog{l: l, last: map[string]time.Time{}, hush: map[string]int{}}
}

// warn logs msg with args unless a warning of the same kind was logged in the last
// logEvery.
func (r *rateLog) warn(kind, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.last[kind]) < logEvery {
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

// kgoLogger passes franz-go's errors to slog; its warnings (one per failed dial, say) are
// left out: the channel logs what they cause, rate-limited.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelError }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level > kgo.LogLevelError {
		return
	}
	k.l.Log(context.Background(), slog.LevelError, "kafka client: "+msg, keyvals...)
}
