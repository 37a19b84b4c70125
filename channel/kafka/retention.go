package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// WithRetention sets the retention.ms of the topic this package creates, and of the
// one it finds created before (the broker's sluice.dev/retention): records are kept at
// least d after they were stored, delivered or not, for replay. 0 (the default) leaves
// the topic's retention as it is (the cluster's log.retention.hours for a new one). It
// cannot be combined with WithTopic: an external topic's configuration is its owner's.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.retention = d }
}

// retentionMs is the retention.ms value of d.
func retentionMs(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// applyRetention sets the topic's retention.ms to the configured retention, if any.
func (c *Channel) applyRetention(ctx context.Context) error {
	if c.cfg.retention <= 0 {
		return nil
	}
	v := retentionMs(c.cfg.retention)
	resps, err := c.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &v}}, c.topic)
	if err == nil {
		for _, r := range resps {
			if r.Err != nil {
				err = errors.Join(err, r.Err)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("setting retention.ms=%s of topic %s: %w", v, c.topic, err)
	}
	return nil
}
