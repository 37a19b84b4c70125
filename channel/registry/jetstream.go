package registry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/jetstream"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/bytesize"
)

// jetstreamBackend opens every jetstream broker's channel on one NATS connection: to an
// embedded server storing under --data-dir, or to the cluster at --nats-url.
type jetstreamBackend struct {
	dataDir  string
	natsURL  string
	maxBytes bytesize.Size
	ackWait  time.Duration
	replicas int
	sync     string

	js *jetstream.Backend
}

func (j *jetstreamBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&j.dataDir, "data-dir", "", "directory of the embedded JetStream server's files (jetstream channel)")
	fs.StringVar(&j.natsURL, "nats-url", "", "use this external NATS cluster for the jetstream channel instead of the embedded server")
	fs.Var(&j.maxBytes, "jetstream-max-bytes", "bytes one broker's JetStream stream may hold; when full, ingress answers 429 (default: unlimited, up to the disk)")
	fs.IntVar(&j.replicas, "jetstream-replicas", 0, "servers of the NATS cluster holding each broker's stream (1-5); above 1 a quorum stores each event before its 202 (default: 1 embedded, min(3, cluster size) with --nats-url)")
	fs.StringVar(&j.sync, "jetstream-sync", string(jetstream.SyncInterval), "when the embedded JetStream server fsyncs: interval (a 202 survives a process crash; NATS syncs every 2 minutes) or always (also a power loss, one fsync per write); see docs/reliability.md")
	fs.DurationVar(&j.ackWait, "jetstream-ack-wait", jetstream.DefaultAckWait, "after a crash, how long JetStream waits before redelivering the events a dead process held")
}

func (j *jetstreamBackend) needs() string {
	return "--data-dir DIR (embedded NATS server) or --nats-url URL (external cluster)"
}

// The settings (config.Settings) the jetstream backend reads: a NATS JetStream stream
// config's maxBytes and replicas, wherever Knative's NATS objects put them (a
// NatsJetStreamChannel's spec.stream.config, a NatsJetStreamBroker's
// natsjetstream.eventing.knative.dev/config annotation or natsjetstream-broker-config):
// every key ending in one of these.
const (
	suffixMaxBytes = ".maxBytes"
	suffixReplicas = ".replicas"
)

// jetstreamSettings are a broker's settings parsed; zero values are the flags'.
type jetstreamSettings struct {
	maxBytes int64
	replicas int
}

// parseJetStream parses and validates the settings of a jetstream broker; errors name
// the key. Replicas above 1 need a cluster (external).
func parseJetStream(s config.Settings, external bool) (jetstreamSettings, error) {
	var out jetstreamSettings
	for _, k := range slices.Sorted(maps.Keys(s)) {
		v := strings.TrimSpace(s[k])
		switch {
		case strings.HasSuffix(k, suffixMaxBytes):
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return out, fmt.Errorf("%s: %q is not a positive number of bytes", k, s[k])
			}
			out.maxBytes = n
		case strings.HasSuffix(k, suffixReplicas):
			n, err := strconv.Atoi(v)
			switch {
			case err != nil || n < 1 || n > 5:
				return out, fmt.Errorf("%s: %q is not a number of replicas from 1 to 5", k, s[k])
			case n > 1 && !external:
				return out, fmt.Errorf("%s: %d: the embedded NATS server is one node; replicas above 1 need --nats-url", k, n)
			}
			out.replicas = n
		default:
			return out, fmt.Errorf("%s: not read by this backend", k)
		}
	}
	return out, nil
}

func (j *jetstreamBackend) check(s config.Settings) error {
	_, err := parseJetStream(s, j.natsURL != "")
	return err
}

func (j *jetstreamBackend) start(ctx context.Context, e env) (bool, error) {
	if j.replicas < 0 || j.replicas > 5 {
		return false, fmt.Errorf("--jetstream-replicas %d: want 1 to 5 (0: automatic)", j.replicas)
	}
	if j.dataDir == "" && j.natsURL == "" {
		return false, nil
	}
	if j.replicas > 1 && j.natsURL == "" {
		return false, fmt.Errorf("--jetstream-replicas %d: the embedded server is one node; replicas need --nats-url", j.replicas)
	}
	sync, err := syncOption(j.sync, j.natsURL)
	if err != nil {
		return false, err
	}
	opts := []jetstream.Option{jetstream.WithAckWait(j.ackWait)}
	if e.reg != nil {
		opts = append(opts, jetstream.WithRegisterer(e.reg))
	}
	if j.maxBytes > 0 {
		opts = append(opts, jetstream.WithMaxBytes(int64(j.maxBytes)))
	}
	js, err := jetstream.OpenBackend(ctx, jetstream.WithDataDir(j.dataDir), jetstream.WithURL(j.natsURL),
		jetstream.WithBackendLogger(e.log), jetstream.WithChannelOptions(opts...),
		jetstream.WithEmbeddedOptions(sync...))
	if err != nil {
		return false, err
	}
	j.js = js
	if j.replicas == 0 { // automatic: R3 on a cluster of 3 or more, else one per server
		j.replicas = min(3, js.ClusterSize())
	}
	e.log.Info("jetstream: stream replicas", "replicas", j.replicas, "cluster_size", js.ClusterSize())
	return true, nil
}

func (j *jetstreamBackend) open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	s, err := parseJetStream(b.Settings, j.natsURL != "")
	if err != nil {
		return nil, err
	}
	opts := []jetstream.Option{jetstream.WithReplicas(j.replicas)}
	if s.replicas > 0 {
		opts[0] = jetstream.WithReplicas(s.replicas)
	}
	if s.maxBytes > 0 { // after the backend's own options: the broker's bound wins
		opts = append(opts, jetstream.WithMaxBytes(s.maxBytes))
	}
	opts = append(opts, jetstream.WithRetention(b.Retention)) // sluice.dev/retention: an archive stream (archive.go)
	return j.js.New(ctx, b.Key(), opts...)
}

func (j *jetstreamBackend) close(ctx context.Context) error { return j.js.Close(ctx) }

func (j *jetstreamBackend) given() bool { return j.dataDir != "" || j.natsURL != "" }
