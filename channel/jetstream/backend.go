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

// BackendConfig says where a Backend finds its server. Exactly one of DataDir and URL
// must be set.
type BackendConfig struct {
	// DataDir runs an embedded server storing its files there.
	DataDir string
	// URL connects to an external NATS cluster with JetStream (comma-separated URLs).
	URL string
	// Logger receives connection and server events. Default: discard.
	Logger *slog.Logger
	// Embedded are options for the embedded server.
	Embedded []EmbeddedOption
	// Channel are options applied to every Channel the Backend opens (before the
	// options given to New).
	Channel []Option
}

// OpenBackend starts the embedded server or connects to the external cluster.
func OpenBackend(ctx context.Context, cfg BackendConfig) (*Backend, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{opts: append([]Option{WithLogger(log)}, cfg.Channel...), log: log}
	switch {
	case cfg.DataDir != "" && cfg.URL != "":
		return nil, errors.New("jetstream: choose a data directory (embedded server) or a NATS URL, not both")
	case cfg.DataDir != "":
		emb, err := StartEmbedded(ctx, cfg.DataDir, append([]EmbeddedOption{WithServerLogger(log)}, cfg.Embedded...)...)
		if err != nil {
			return nil, err
		}
		nc, err := emb.Connect()
		if err != nil {
			_ = emb.Shutdown(ctx)
			return nil, err
		}
		b.emb, b.nc = emb, nc
		log.Info("jetstream: embedded NATS server started", "data_dir", cfg.DataDir)
	case cfg.URL != "":
		nc, err := nats.Connect(cfg.URL,
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
			return nil, fmt.Errorf("jetstream: connect to %s: %w", cfg.URL, err)
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
