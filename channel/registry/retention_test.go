package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/config"
)

// TestRetentionRefused: a broker with sluice.dev/retention on the memory channel (by
// name or as the default) does not open, the error naming the annotation; without it,
// it opens.
func TestRetentionRefused(t *testing.T) {
	r, err := started(t, nil)
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
