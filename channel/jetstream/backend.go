package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Backend is the one NATS connection every broker's Channel shares: to a server
// embedded in the process, or to an external cluster. Its methods are safe for
// concurrent use; Close it after the brokers' Channels.
type Backend struct {
	emb  *Embedded // nil for an external cluster
	nc   *nats.Conn
	opts []Option
	log  *slog.Logger
}

// BackendOption configures OpenBackend. Exactly one of WithDataDir and WithURL must be
// given.
type BackendOption func(*backendConfig)

type backendConfig struct {
	dataDir  string
	url      string
	logger   *slog.Logger
	embedded []EmbeddedOption
	channel  []Option
}

// WithDataDir runs an embedded server storing its files in dir.
func WithDataDir(dir string) BackendOption { return func(c *backendConfig) { c.dataDir = dir } }

// WithURL connects to an external NATS cluster with JetStream (comma-separated URLs).
func WithURL(url string) BackendOption { return func(c *backendConfig) { c.url = url } }

// WithBackendLogger receives connection and server events. Default: discard.
func WithBackendLogger(l *slog.Logger) BackendOption { return func(c *backendConfig) { c.logger = l } }

// WithEmbeddedOptions passes options to the embedded server.
func WithEmbeddedOptions(opts ...EmbeddedOption) BackendOption {
	return func(c *backendConfig) { c.embedded = append(c.embedded, opts...) }
}

// WithChannelOptions applies opts to every Channel the Backend opens (before the options
// given to New).
func WithChannelOptions(opts ...Option) BackendOption {
	return func(c *backendConfig) { c.channel = append(c.channel, opts...) }
}

// OpenBackend starts the embedded server or connects to the external cluster.
func OpenBackend(ctx context.Context, opts ...BackendOption) (*Backend, error) {
	var cfg backendConfig
	for _, o := range opts {
		o(&cfg)
	}
	log := cfg.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{opts: append([]Option{WithLogger(log)}, cfg.channel...), log: log}
	switch {
	case cfg.dataDir != "" && cfg.url != "":
		return nil, errors.New("jetstream: choose a data directory (embedded server) or a NATS URL, not both")
	case cfg.dataDir != "":
		emb, err := StartEmbedded(ctx, cfg.dataDir, append([]EmbeddedOption{WithServerLogger(log)}, cfg.embedded...)...)
		if err != nil {
			return nil, err
		}
		nc, err := emb.Connect()
		if err != nil {
			_ = emb.Shutdown(ctx)
			return nil, err
		}
		b.emb, b.nc = emb, nc
		b.opts = append(b.opts, withDiskFull(emb.DiskFull))
		log.Info("jetstream: embedded NATS server started", "data_dir", cfg.dataDir)
	case cfg.url != "":
		nc, err := nats.Connect(cfg.url,
			nats.Name("sluice"),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				log.Warn("jetstream: disconnected from NATS; ingress answers 503 until reconnected", "err", err)
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				log.Info("jetstream: reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			}),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				log.Warn("jetstream: NATS error", "err", err)
			}))
		if err != nil {
			return nil, fmt.Errorf("jetstream: connect to %s: %w", cfg.url, err)
		}
		b.nc = nc
		log.Info("jetstream: connected to NATS", "url", nc.ConnectedUrlRedacted())
	default:
		return nil, errors.New("jetstream: the jetstream channel needs a data directory (embedded server) or a NATS URL")
	}
	return b, nil
}

// New opens the channel of the broker called brokerKey on the backend's connection.
func (b *Backend) New(ctx context.Context, brokerKey string, opts ...Option) (*Channel, error) {
	return New(ctx, b.nc, brokerKey, append(append([]Option(nil), b.opts...), opts...)...)
}

// ClusterSize returns how many servers the backend's NATS cluster has, as far as the
// connection knows them (the URLs given plus those the cluster announced): 1 for the
// embedded server or a server that is not part of a cluster.
func (b *Backend) ClusterSize() int {
	if b.emb != nil || b.nc.ConnectedClusterName() == "" {
		return 1
	}
	return max(1, len(b.nc.Servers()))
}

// Conn returns the backend's NATS connection.
func (b *Backend) Conn() *nats.Conn { return b.nc }

// Close closes the connection (flushing acks still buffered), then shuts the embedded server down, waiting
// for its store to be flushed, or until ctx ends.
func (b *Backend) Close(ctx context.Context) error {
	b.nc.Close()
	if b.emb == nil {
		return nil
	}
	if err := b.emb.Shutdown(ctx); err != nil {
		return err
	}
	b.log.Info("jetstream: embedded NATS server stopped")
	return nil
}
