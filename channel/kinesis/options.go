package kinesis

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// Defaults of the options below, and the channel's fixed settings.
const (
	// DefaultShards is the shard count of a stream this package creates.
	DefaultShards = 2
	// DefaultPollInterval is how long a shard reader waits before asking for more
	// records after an empty answer. Kinesis allows 5 GetRecords calls per second per
	// shard, shared by every reader of the shard (one per trigger).
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultCheckpointInterval is how often a subscription's settled positions are
	// written to its checkpoint file.
	DefaultCheckpointInterval = 500 * time.Millisecond

	// maxUnacked bounds, per subscription, the records routed to it that were read and
	// not yet settled: its readers stop reading until some are.
	maxUnacked = 1024
	// PutRecords limits: 500 records and 5 MiB per call, 1 MiB per record (data and
	// partition key).
	maxBatchRecords = 500
	maxBatchBytes   = 5 << 20
	maxRecordBytes  = 1 << 20
	// shardRefresh is how often a consumer lists the stream's shards to find the
	// children of a split or merge.
	shardRefresh = 2 * time.Second
)

type config struct {
	api                *kinesis.Client
	stream             string // an existing stream, used as it is
	shards             int32
	checkpointDir      string
	pollInterval       time.Duration
	checkpointInterval time.Duration
	retention          time.Duration // at least this retention period; 0: the stream's (retention.go)
	logger             *slog.Logger
	leaseAPI           *dynamodb.Client
	leaseTable         string
	leaseDuration      time.Duration
}

func defaultConfig() config {
	return config{
		shards:             DefaultShards,
		pollInterval:       DefaultPollInterval,
		checkpointInterval: DefaultCheckpointInterval,
		logger:             slog.New(slog.DiscardHandler),
		leaseDuration:      DefaultLeaseDuration,
	}
}

// validate is the one place the options are checked; New returns its error.
func (c *config) validate() error {
	var errs []error
	if c.api == nil {
		errs = append(errs, errors.New("WithAPI: no Kinesis client"))
	}
	if c.checkpointDir == "" && c.leaseTable == "" {
		errs = append(errs, errors.New("WithCheckpointDir: no directory for the subscriptions' checkpoints (nor WithLeaseTable)"))
	}
	if c.leaseTable != "" && c.leaseAPI == nil {
		errs = append(errs, fmt.Errorf("WithLeaseTable(%q): no DynamoDB client", c.leaseTable))
	}
	if c.leaseDuration < MinLeaseDuration {
		errs = append(errs, fmt.Errorf("WithLeaseDuration(%v): want at least %v", c.leaseDuration, MinLeaseDuration))
	}
	if c.shards < 1 {
		errs = append(errs, fmt.Errorf("WithShards(%d): want at least 1", c.shards))
	}
	if c.pollInterval <= 0 {
		errs = append(errs, fmt.Errorf("WithPollInterval(%v): want a positive duration", c.pollInterval))
	}
	if c.checkpointInterval <= 0 {
		errs = append(errs, fmt.Errorf("WithCheckpointInterval(%v): want a positive duration", c.checkpointInterval))
	}
	if c.retention < 0 || c.retention > MaxRetention {
		errs = append(errs, fmt.Errorf("WithRetention(%v): want 0 (the stream's) up to %v", c.retention, MaxRetention))
	}
	if c.retention > 0 && c.stream != "" {
		errs = append(errs, fmt.Errorf("WithRetention(%v): not with WithStream(%q): an existing stream keeps its own retention", c.retention, c.stream))
	}
	if c.logger == nil {
		errs = append(errs, errors.New("WithLogger(nil)"))
	}
	return errors.Join(errs...)
}

// Option configures a Channel; pass options to New.
type Option func(*config)

// WithAPI sets the Kinesis client (the AWS SDK's, built with its standard credential
// chain and region; an endpoint override reaches a compatible server). Required.
func WithAPI(api *kinesis.Client) Option { return func(c *config) { c.api = api } }

// WithStream names an existing stream to use as it is, instead of the stream this
// package names and creates for the broker (see StreamName).
func WithStream(name string) Option { return func(c *config) { c.stream = name } }

// WithShards sets the shard count of the stream when this package creates it, default
// DefaultShards. An existing stream keeps its shards.
func WithShards(n int32) Option { return func(c *config) { c.shards = n } }

// WithCheckpointDir sets the directory that holds each subscription's checkpoint (the
// sequence number settled up to, per shard). Required without WithLeaseTable; keep it
// across restarts. With a lease table, a checkpoint found here seeds the leases of a
// subscription that has none yet.
func WithCheckpointDir(dir string) Option { return func(c *config) { c.checkpointDir = dir } }

// WithPollInterval sets how long a shard reader waits after an empty GetRecords answer,
// default DefaultPollInterval.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithCheckpointInterval sets how often settled positions are written, default
// DefaultCheckpointInterval. A crash redelivers at most what was settled in the last
// interval.
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpointInterval = d }
}

// WithLogger sets the logger for backend errors and recoveries. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithLeaseTable keeps the subscriptions' checkpoints in the DynamoDB table called name,
// through api, created if missing, as leases: replicas of the broker opening the same
// stream with the same table share its shards (each shard read by one replica at a time)
// and take over the shards of one that stops. Without it, checkpoints are files and every
// replica reads every shard: run one replica per stream.
func WithLeaseTable(api *dynamodb.Client, name string) Option {
	return func(c *config) { c.leaseAPI, c.leaseTable = api, name }
}

// WithLeaseDuration sets how long a replica's lease outlives its last renewal (renewals
// come every third of it), default DefaultLeaseDuration, at least MinLeaseDuration: the
// shards of a replica that dies are taken over after about this long.
func WithLeaseDuration(d time.Duration) Option { return func(c *config) { c.leaseDuration = d } }
