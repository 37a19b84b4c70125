package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options below and of the channel's fixed settings.
const (
	// DefaultTopicPrefix prefixes every topic and consumer group name.
	DefaultTopicPrefix = "sluice"
	// DefaultPartitions is the partition count of topics this package creates.
	DefaultPartitions = 8
	// DefaultReplicationFactor is the replication factor of topics this package creates:
	// 0, the cluster's default.replication.factor.
	DefaultReplicationFactor = 0
	// minInSyncReplicas is the min.insync.replicas of a topic this package creates with a
	// replication factor of 3 or more: with acks=all a record is acknowledged only once
	// two replicas hold it, so losing one broker loses no acknowledged event.
	minInSyncReplicas = "2"
	// DefaultCommitInterval is how often settled offsets are committed.
	DefaultCommitInterval = 500 * time.Millisecond
	// DefaultLagInterval is how often consumer lag is refreshed from the cluster.
	DefaultLagInterval = time.Second

	// maxUnacked bounds the messages of one subscription handed out or waiting to be
	// handed out and not yet settled: the consumer fetches no more until messages are
	// settled, so its memory stays bounded.
	maxUnacked = 1024
	// deliveryTimeout bounds how long a produced record may wait for the cluster before
	// it fails (Kafka's delivery.timeout.ms). Publish returns earlier when its context ends.
	deliveryTimeout = 30 * time.Second
	// linger is how long the producer waits for more records before it sends a batch:
	// none. Every Publish waits for acks=all while an HTTP request waits on it, and
	// concurrent requests batch by themselves while a produce request is in flight;
	// franz-go's default (10 ms) would add 10 ms to each request and cut the rate of
	// concurrent publishers (go test -bench Publish ./channel/kafka/ shows it).
	linger = 0
	// fetchMaxBytes and fetchMaxPartitionBytes bound what one fetch of a consumer may
	// return, compressed. A fetch is decompressed whole and held until polled, and
	// batches compress well: with 16 MiB and franz-go's 1 MiB per partition, a consumer
	// under overload held so many decompressed batches that the heap sat at its limit and
	// GC took CPU from delivery; 64 KiB per partition held far less and delivered more
	// (docs/decisions/0015-kafka-fetch-bounds.md). 64 KiB is still dozens of records per
	// partition per fetch, each fetch one round trip.
	fetchMaxBytes          = 4 << 20
	fetchMaxPartitionBytes = 64 << 10
)

// config holds what the options set.
type config struct {
	brokers        []string
	prefix         string
	topic          string // an existing topic, used as it is
	partitions     int32
	replication    int16
	minInsync      int16         // 0: the cluster's setting
	retention      time.Duration // retention.ms of the topic; 0: left as it is (retention.go)
	commitInterval time.Duration
	lagInterval    time.Duration
	logger         *slog.Logger
	registerer     prometheus.Registerer
}

func defaultConfig() config {
	return config{
		prefix:         DefaultTopicPrefix,
		partitions:     DefaultPartitions,
		replication:    DefaultReplicationFactor,
		commitInterval: DefaultCommitInterval,
		lagInterval:    DefaultLagInterval,
		logger:         slog.New(slog.DiscardHandler),
	}
}

// validate is the one place the options are checked; New returns its error.
func (c *config) validate() error {
	var errs []error
	if len(c.brokers) == 0 {
		errs = append(errs, errors.New("WithSeedBrokers: no seed brokers"))
	}
	if c.prefix == "" {
		errs = append(errs, errors.New("WithTopicPrefix: empty prefix"))
	}
	if c.partitions < 1 {
		errs = append(errs, fmt.Errorf("WithPartitions: %d, want at least 1", c.partitions))
	}
	if c.replication < 0 {
		errs = append(errs, fmt.Errorf("WithReplicationFactor: %d, want at least 1 (or 0: the cluster's default)", c.replication))
	}
	if c.minInsync < 0 || (c.replication > 0 && c.minInsync > c.replication) {
		errs = append(errs, fmt.Errorf("WithMinInsyncReplicas: %d, want 0 (the cluster's setting) to the replication factor %d", c.minInsync, c.replication))
	}
	if c.retention < 0 {
		errs = append(errs, fmt.Errorf("WithRetention: %s, want a positive duration (or 0: the topic's own)", c.retention))
	}
	if c.retention > 0 && c.topic != "" {
		errs = append(errs, fmt.Errorf("WithRetention: not with WithTopic %q: an external topic keeps its own retention.ms", c.topic))
	}
	if c.commitInterval <= 0 {
		errs = append(errs, fmt.Errorf("WithCommitInterval: %s, want a positive duration", c.commitInterval))
	}
	if c.lagInterval <= 0 {
		errs = append(errs, fmt.Errorf("WithLagInterval: %s, want a positive duration", c.lagInterval))
	}
	if c.logger == nil {
		errs = append(errs, errors.New("WithLogger: nil logger"))
	}
	return errors.Join(errs...)
}

// Option configures a Channel; pass options to New.
type Option func(*config)

// WithSeedBrokers sets the host:port addresses the client bootstraps from. Required.
func WithSeedBrokers(addrs ...string) Option {
	return func(c *config) { c.brokers = append(c.brokers, addrs...) }
}

// WithTopicPrefix sets the prefix of the channel's topic and consumer group names,
// default DefaultTopicPrefix. The topic is "<prefix>.<broker key>" (characters Kafka does
// not allow in topic names replaced by '_'); a subscription's group is "<topic>/<name>".
func WithTopicPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithTopic makes the channel use an existing topic, named as it is, instead of the one
// WithTopicPrefix names: the channel never creates it (Knative's Kafka broker
// annotation kafka.eventing.knative.dev/external.topic). Consumer groups are still
// "<topic>/<subscription>".
func WithTopic(name string) Option { return func(c *config) { c.topic = name } }

// WithPartitions sets the partition count of the topic when this package creates it,
// default DefaultPartitions. An existing topic is used as it is. Partitions bound how
// many replicas can share a subscription (one consumer per partition): a topic of one
// partition is read by one replica only, and New logs a warning saying so.
func WithPartitions(n int32) Option { return func(c *config) { c.partitions = n } }

// WithReplicationFactor sets the replication factor of the topic when this package
// creates it. Default DefaultReplicationFactor, 0: the cluster's default.replication.factor
// (set it to 3, with min.insync.replicas=2, on a cluster of 3 or more brokers). A topic
// created with a factor of 3 or more set here gets min.insync.replicas=2, so an acks=all
// write is held by two brokers before Publish returns.
func WithReplicationFactor(n int16) Option { return func(c *config) { c.replication = n } }

// WithMinInsyncReplicas sets the topic's min.insync.replicas when this package creates
// it, default 0: the cluster's default. Publish uses acks=all, so with replication factor
// 3 and 2 here a 202 means two brokers have the event: it survives the loss of one
// broker's machine or disk (docs/reliability.md). An existing topic is used as it is.
func WithMinInsyncReplicas(n int16) Option { return func(c *config) { c.minInsync = n } }

// WithCommitInterval sets how often each consumer commits its settled offsets, default
// DefaultCommitInterval. A crash redelivers at most what was settled in the last interval.
func WithCommitInterval(d time.Duration) Option { return func(c *config) { c.commitInterval = d } }

// WithLagInterval sets how often the end offsets behind Consumer.Len and the lag metric
// are refreshed from the cluster, default DefaultLagInterval.
func WithLagInterval(d time.Duration) Option { return func(c *config) { c.lagInterval = d } }

// WithLogger sets the logger for backend errors (unreachable cluster, failed commits),
// which are logged at most once per 10 seconds per kind; by default nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithRegisterer registers the channel's metrics (consumer lag per subscription,
// published records, publish errors; all labelled with the topic) with r. Close
// unregisters them.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }
