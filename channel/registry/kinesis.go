package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/config"
)

// kinesisBackend opens one stream per broker through one AWS SDK client: the SDK's
// standard credential chain and region, or --kinesis-region, and --kinesis-endpoint for
// a Kinesis-compatible server. Checkpoints live under --kinesis-checkpoint-dir or, shared
// by replicas, in the DynamoDB lease table --kinesis-lease-table (--dynamodb-endpoint for
// a DynamoDB-compatible server); either configures the backend.
type kinesisBackend struct {
	region        string
	endpoint      string
	shards        int
	checkpointDir string
	leaseTable    string
	leaseDuration time.Duration
	dynamoDB      string

	api    *awskinesis.Client
	leases *dynamodb.Client
	log    *slog.Logger
}

func (k *kinesisBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&k.checkpointDir, "kinesis-checkpoint-dir", "", "directory of the kinesis channel's checkpoints (each trigger's settled position per shard); keep it across restarts")
	fs.StringVar(&k.region, "kinesis-region", "", "AWS region of the kinesis channel's streams (default: the SDK's, e.g. AWS_REGION)")
	fs.StringVar(&k.endpoint, "kinesis-endpoint", "", "URL of a Kinesis-compatible server instead of AWS's endpoint")
	fs.IntVar(&k.shards, "kinesis-shards", kinesis.DefaultShards, "shards of a stream the kinesis channel creates (an existing stream keeps its own)")
	fs.StringVar(&k.leaseTable, "kinesis-lease-table", "", "DynamoDB table (created if missing) holding the kinesis channel's checkpoints as leases, so that replicas share each stream's shards")
	fs.DurationVar(&k.leaseDuration, "kinesis-lease-duration", kinesis.DefaultLeaseDuration, "how long a replica's shard lease outlives its last renewal: a dead replica's shards are taken over after it")
	fs.StringVar(&k.dynamoDB, "dynamodb-endpoint", "", "URL of a DynamoDB-compatible server for --kinesis-lease-table instead of AWS's endpoint")
}

func (k *kinesisBackend) needs() string {
	return "--kinesis-checkpoint-dir DIR or --kinesis-lease-table NAME (and AWS credentials and a region, or --kinesis-endpoint URL)"
}

// keyKinesisStream is the setting naming an existing stream a broker uses as it is;
// without it, Sluice names the stream and creates it.
const keyKinesisStream = "metadata.annotations.sluice.dev/kinesis-stream"

func (k *kinesisBackend) check(s config.Settings) error { return onlyKeys(s, keyKinesisStream) }

func (k *kinesisBackend) start(ctx context.Context, e env) (bool, error) {
	if !k.given() {
		return false, nil
	}
	if k.shards < 1 {
		return false, fmt.Errorf("--kinesis-shards %d: want at least 1", k.shards)
	}
	if k.leaseDuration < kinesis.MinLeaseDuration {
		return false, fmt.Errorf("--kinesis-lease-duration %v: want at least %v", k.leaseDuration, kinesis.MinLeaseDuration)
	}
	var opts []func(*awsconfig.LoadOptions) error
	if k.region != "" {
		opts = append(opts, awsconfig.WithRegion(k.region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return false, fmt.Errorf("kinesis: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return false, errors.New("kinesis: no AWS region: set --kinesis-region or AWS_REGION")
	}
	k.api = awskinesis.NewFromConfig(cfg, func(o *awskinesis.Options) {
		if k.endpoint != "" {
			o.BaseEndpoint = aws.String(k.endpoint)
		}
	})
	if k.leaseTable != "" {
		k.leases = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			if k.dynamoDB != "" {
				o.BaseEndpoint = aws.String(k.dynamoDB)
			}
		})
	}
	k.log = e.log
	return true, nil
}

func (k *kinesisBackend) open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	opts := []kinesis.Option{
		kinesis.WithAPI(k.api), kinesis.WithCheckpointDir(k.checkpointDir),
		kinesis.WithShards(int32(k.shards)),
		kinesis.WithLogger(k.log.With("channel", "kinesis", "broker", b.Key())),
	}
	if k.leases != nil {
		opts = append(opts, kinesis.WithLeaseTable(k.leases, k.leaseTable), kinesis.WithLeaseDuration(k.leaseDuration))
	}
	if s := b.Settings[keyKinesisStream]; s != "" {
		if b.Retention > 0 {
			return nil, fmt.Errorf("metadata.annotations.sluice.dev/retention: not with an existing stream (%s): set its retention where it is managed", keyKinesisStream)
		}
		opts = append(opts, kinesis.WithStream(s))
	}
	if b.Retention > 0 { // sluice.dev/retention
		opts = append(opts, kinesis.WithRetention(b.Retention))
	}
	return kinesis.New(ctx, b.Key(), opts...)
}

func (k *kinesisBackend) close(context.Context) error { return nil }

func (k *kinesisBackend) given() bool { return k.checkpointDir != "" || k.leaseTable != "" }
