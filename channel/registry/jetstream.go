package registry

import (
	"context"
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
	sync     string

	js *jetstream.Backend
}

func (j *jetstreamBackend) flags(fs *pflag.FlagSet) {
	fs.StringVar(&j.dataDir, "data-dir", "", "directory of the embedded JetStream server's files (jetstream channel)")
	fs.StringVar(&j.natsURL, "nats-url", "", "use this external NATS cluster for the jetstream channel instead of the embedded server")
	fs.Var(&j.maxBytes, "jetstream-max-bytes", "bytes one broker's JetStream stream may hold; when full, ingress answers 429 (default: unlimited, up to the disk)")
	fs.StringVar(&j.sync, "jetstream-sync", string(jetstream.SyncInterval), "when the embedded JetStream server fsyncs: interval (a 202 survives a process crash; NATS syncs every 2 minutes) or always (also a power loss, one fsync per write); see docs/reliability.md")
	fs.DurationVar(&j.ackWait, "jetstream-ack-wait", jetstream.DefaultAckWait, "after a crash, how long JetStream waits before redelivering the events a dead process held")
}

func (j *jetstreamBackend) needs() string {
	return "--data-dir DIR (embedded NATS server) or --nats-url URL (external cluster)"
}

func (j *jetstreamBackend) start(ctx context.Context, e env) (bool, error) {
	if j.dataDir == "" && j.natsURL == "" {
		return false, nil
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
	return true, nil
}

func (j *jetstreamBackend) open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	return j.js.New(ctx, b.Key())
}

func (j *jetstreamBackend) close(ctx context.Context) error { return j.js.Close(ctx) }
