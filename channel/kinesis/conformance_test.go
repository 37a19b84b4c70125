package kinesis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
)

// newChannel opens a channel on a stream of its own (a fresh broker key) with its
// checkpoints in dir.
func newChannel(t *testing.T, key, dir string, opts ...kinesis.Option) *kinesis.Channel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts = append([]kinesis.Option{kinesis.WithAPI(kinesistest.Client(t)), kinesis.WithCheckpointDir(dir),
		kinesis.WithPollInterval(50 * time.Millisecond), kinesis.WithCheckpointInterval(100 * time.Millisecond)}, opts...)
	c, err := kinesis.New(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// uniqueKey returns a broker key of its own for t, whose stream is deleted when t ends
// (a server that outlives many runs would otherwise reach its shard limit).
func uniqueKey(t *testing.T) string {
	key := fmt.Sprintf("test/s%d", rand.Uint32())
	api := kinesistest.Client(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = api.DeleteStream(ctx, &awskinesis.DeleteStreamInput{StreamName: aws.String(kinesis.StreamName(key)),
			EnforceConsumerDeletion: aws.Bool(true)})
	})
	return key
}

// TestConformance runs the channel contract suite against the real Kinesis-compatible
// server; every subtest gets a stream of its own.
func TestConformance(t *testing.T) {
	kinesistest.Endpoint(t)
	type opened struct{ key, dir string }
	seen := map[channel.Channel]opened{}
	channeltest.Run(t, channeltest.Harness{
		Open: func(t *testing.T) channel.Channel {
			o := opened{uniqueKey(t), t.TempDir()}
			c := newChannel(t, o.key, o.dir)
			seen[c] = o
			return c
		},
		Durable: true,
		Reopen: func(t *testing.T, old channel.Channel) channel.Channel {
			_ = old.Close()
			o := seen[old]
			return newChannel(t, o.key, o.dir)
		},
		MaxUnsettled: 1024,
		TooLarge:     1 << 20, // a record over Kinesis's 1 MiB
	})
}
