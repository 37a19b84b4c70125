package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
