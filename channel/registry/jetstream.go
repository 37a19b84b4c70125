package registry

import (
	"context"
	"fmt"
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

func (j *jetstreamBackend) check(s config.Settings) error { return onlyKeys(s) }

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
	return j.js.New(ctx, b.Key(), jetstream.WithReplicas(j.replicas), jetstream.WithRetention(b.Retention)) // sluice.dev/retention: an archive stream
}

func (j *jetstreamBackend) close(ctx context.Context) error { return j.js.Close(ctx) }

func (j *jetstreamBackend) given() bool { return j.dataDir != "" || j.natsURL != "" }
