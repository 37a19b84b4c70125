package kafka

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the options below.
const (
	// DefaultTopicPrefix prefixes every topic and consumer group name.
	DefaultTopicPrefix = "sluice"
	// DefaultPartitions is the partition count of topics this package creates.
	DefaultPartitions = 8
	// DefaultReplicationFactor is the replication factor of topics this package creates.
	DefaultReplicationFactor = 1
	// DefaultMaxUnacked bounds the messages of one subscription handed out or waiting to
	// be handed out and not yet settled.
	DefaultMaxUnacked = 1024
	// DefaultCommitInterval is how often settled offsets are committed.
	DefaultCommitInterval = 500 * time.Millisecond
	// DefaultLagInterval is how often consumer lag is refreshed from the cluster.
	DefaultLagInterval = time.Second
	// DefaultDeliveryTimeout bounds how long a produced record may wait for the cluster
	// before it fails (Kafka's delivery.timeout.ms).
	DefaultDeliveryTimeout = 30 * time.Second
)

// config holds what the options set.
type config struct {
	brokers         []string
	prefix          string
	partitions      int32
	replication     int16
	maxUnacked      int
	linger          time.Duration
	commitInterval  time.Duration
	lagInterval     time.Duration
	deliveryTimeout time.Duration
	fetchMaxBytes   int32
	logger          *slog.Logger
	registerer      prometheus.Registerer
}

func defaultConfig() config {
	return config{
		prefix:          DefaultTopicPrefix,
		partitions:      DefaultPartitions,
		replication:     DefaultReplicationFactor,
		maxUnacked:      DefaultMaxUnacked,
		commitInterval:  DefaultCommitInterval,
		lagInterval:     DefaultLagInterval,
		deliveryTimeout: DefaultDeliveryTimeout,
		fetchMaxBytes:   16 << 20,
		logger:          slog.New(slog.DiscardHandler),
	}
}

// Option configures a Channel; pass options to New.
type Option func(*config)

// SeedBrokers sets the host:port addresses the client bootstraps from. Required.
func SeedBrokers(addrs ...string) Option {
	return func(c *config) { c.brokers = append(c.brokers, addrs...) }
}

// TopicPrefix sets the prefix of the channel's topic and consumer group names, default
// DefaultTopicPrefix. The topic is "<prefix>.<broker key>" (characters Kafka does not
// allow in topic names replaced by '_'); a subscription's group is "<topic>/<name>".
func TopicPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// Partitions sets the partition count of the topic when this package creates it, default
// DefaultPartitions. An existing topic is used as it is. Partitions bound the
// parallelism of ordered subscriptions (one message in flight per partition).
func Partitions(n int32) Option { return func(c *config) { c.partitions = n } }

// ReplicationFactor sets the replication factor of the topic when this package creates
// it, default DefaultReplicationFactor (a single-node cluster). Use 3 in production.
func ReplicationFactor(n int16) Option { return func(c *config) { c.replication = n } }

// MaxUnacked bounds, per subscription, the messages fetched and not yet settled (handed
// out by Receive or waiting to be), default DefaultMaxUnacked. The consumer fetches no
// more until messages are settled, so its memory stays bounded.
func MaxUnacked(n int) Option { return func(c *config) { c.maxUnacked = n } }

// Linger sets how long the producer waits for more records before sending a batch,
// default 0: the records of one Publish call are still sent together, and records of
// concurrent calls batch while a request is in flight.
func Linger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// CommitInterval sets how often each consumer commits its settled offsets, default
// DefaultCommitInterval. A crash redelivers at most what was settled in the last interval.
func CommitInterval(d time.Duration) Option { return func(c *config) { c.commitInterval = d } }

// LagInterval sets how often consumer lag (Consumer.Len and the lag metric) is refreshed
// from the cluster, default DefaultLagInterval.
func LagInterval(d time.Duration) Option { return func(c *config) { c.lagInterval = d } }

// DeliveryTimeout bounds how long a produced record may wait for the cluster before it
// fails, default DefaultDeliveryTimeout. Publish returns earlier when its context ends.
func DeliveryTimeout(d time.Duration) Option { return func(c *config) { c.deliveryTimeout = d } }

// FetchMaxBytes bounds the bytes one fetch of a consumer may return, default 16 MiB.
func FetchMaxBytes(n int32) Option { return func(c *config) { c.fetchMaxBytes = n } }

// Logger sets the logger for backend errors (unreachable cluster, failed commits), which
// are logged at most once per 10 seconds per kind; by default nothing is logged.
func Logger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Registerer registers the channel's metrics (consumer lag per subscription, published
// records, publish errors; all labelled with the topic) with r. Close unregisters them.
func Registerer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }
