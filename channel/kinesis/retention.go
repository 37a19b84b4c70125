package kinesis

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/sluice-broker/sluice/channel"
)

// MaxRetention is the longest retention period Kinesis keeps records for.
const MaxRetention = 8760 * time.Hour

// WithRetention makes New raise the stream's retention period to at least d (whole
// hours, rounded up; the broker's sluice.dev/retention), with
// IncreaseStreamRetentionPeriod; a stream that keeps records longer is left as it is,
// and so is a stream given by WithStream. 0 (the default) leaves the stream's retention
// (24 hours for one this package creates). At most MaxRetention.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// applyRetention raises the stream's retention period to the configured retention.
func (c *Channel) applyRetention(ctx context.Context) error {
	if c.cfg.retention <= 0 || c.cfg.stream != "" {
		return nil
	}
	have, err := c.Retention(ctx)
	if err != nil {
		return err
	}
	hours := int32((c.cfg.retention + time.Hour - 1) / time.Hour)
	if have >= time.Duration(hours)*time.Hour {
		return nil
	}
	_, err = c.api.IncreaseStreamRetentionPeriod(ctx, &kinesis.IncreaseStreamRetentionPeriodInput{
		StreamName: aws.String(c.stream), RetentionPeriodHours: aws.Int32(hours)})
	if err != nil {
		return fmt.Errorf("%w: kinesis: raising the retention of stream %s to %dh: %w", channel.ErrUnavailable, c.stream, hours, err)
	}
	c.cfg.logger.Info("kinesis: stream retention raised", "stream", c.stream, "hours", hours)
	return nil
}
