package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/config"
)

// TestRetentionRefused: a broker with sluice.dev/retention on a channel that keeps no
// event once delivered (memory, by name or as the default; rabbitmq) does not open, the
// error naming the annotation and the channel; without it, a memory broker opens. The
// rabbitmq refusal comes before any connection: its URL need not answer.
func TestRetentionRefused(t *testing.T) {
	r, err := started(t, []string{"--rabbitmq-url", "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		backend   string
		retention time.Duration
		err       string
	}{
		{config.ChannelMemory, 0, ""},
		{config.ChannelMemory, time.Hour, "metadata.annotations.sluice.dev/retention: not on the memory channel"},
		{config.ChannelDefault, time.Hour, "metadata.annotations.sluice.dev/retention: not on the memory channel"},
		{config.ChannelRabbitMQ, time.Hour, "metadata.annotations.sluice.dev/retention: not on the rabbitmq channel"},
	} {
		b := broker("r", tt.backend)
		b.Retention = tt.retention
		ch, err := r.Open(context.Background(), b)
		if tt.err == "" {
			if err != nil {
				t.Errorf("%s without retention: %v", tt.backend, err)
				continue
			}
			_ = ch.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s with retention %s: %v; want %q", tt.backend, tt.retention, err, tt.err)
		}
	}
}
