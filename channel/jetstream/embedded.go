package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// DefaultMaxPayload is the embedded server's largest message: room for an event at
// Sluice's default 1 MiB body limit plus its attributes (NATS's own default is 1 MiB).
const DefaultMaxPayload = 8 << 20

// Embedded is a NATS server with JetStream running inside the process, storing its
// streams under a data directory. Start it once and give every broker's Channel a
// connection from Connect. Its methods are safe for concurrent use.
type Embedded struct {
	srv  *server.Server
	dir  string
	heal *diskHeal
}

// EmbeddedOption configures StartEmbedded.
type EmbeddedOption func(*embeddedConfig)

type embeddedConfig struct {
	listen string
	logger *slog.Logger
	sync   Sync
}

// WithListen makes the embedded server also accept network clients on addr
// ("127.0.0.1:4222"; port 0 picks a free one, see ClientURL), so that other processes
// or tools (the nats CLI) can reach it. Default: in-process connections only.
func WithListen(addr string) EmbeddedOption { return func(c *embeddedConfig) { c.listen = addr } }

// WithServerLogger sends the server's notices, warnings and errors to l. Default: discard.
func WithServerLogger(l *slog.Logger) EmbeddedOption {
	return func(c *embeddedConfig) { c.logger = l }
}

// StartEmbedded starts a NATS server with JetStream storing its files under dataDir
// (created if missing) and waits until it accepts connections or ctx ends. Restarting it
// on the same dataDir recovers every stored message and consumer state.
func StartEmbedded(ctx context.Context, dataDir string, opts ...EmbeddedOption) (*Embedded, error) {
	var cfg embeddedConfig
	for _, o := range opts {
		o(&cfg)
	}
	if dataDir == "" {
		return nil, errors.New("jetstream: embedded server needs a data directory")
	}
	if _, err := ParseSync(string(cfg.sync)); cfg.sync != "" && err != nil {
		return nil, fmt.Errorf("jetstream: WithSync: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("jetstream: data directory: %w", err)
	}
	sopts := &server.Options{
		ServerName:      "sluice",
		JetStream:       true,
		StoreDir:        dataDir,
		DontListen:      cfg.listen == "",
		MaxPayload:      DefaultMaxPayload,
		NoSigs:          true,
		NoSystemAccount: true,
		SyncAlways:      cfg.sync == SyncAlways,
	}
	if cfg.listen != "" {
		host, port, err := net.SplitHostPort(cfg.listen)
		if err != nil {
			return nil, fmt.Errorf("jetstream: listen address %q: %w", cfg.listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("jetstream: listen port %q: %w", port, err)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		sopts.Host, sopts.Port = host, p
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: embedded server: %w", err)
	}
	log := cfg.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	heal := newDiskHeal(srv, dataDir, log)
	srv.SetLoggerV2(serverLogger{l: log, onError: heal.noteError}, false, false, false)
	srv.Start()
	for !srv.ReadyForConnections(100 * time.Millisecond) {
		if ctx.Err() != nil {
			srv.Shutdown()
			return nil, fmt.Errorf("jetstream: embedded server not ready: %w", ctx.Err())
		}
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return nil, fmt.Errorf("jetstream: embedded server started without JetStream (data directory %s)", dataDir)
	}
	heal.start()
	return &Embedded{srv: srv, dir: dataDir, heal: heal}, nil
}

// Connect opens an in-process connection to the server. The connection does not try
// to reconnect once the server is shut down. Close it before Shutdown.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name("sluice"), nats.NoReconnect()}, opts...)
	opts = append(opts, nats.InProcessServer(e.srv))
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect to embedded server: %w", err)
	}
	return nc, nil
}

// ClientURL returns the URL network clients connect to, or "" when the server does not
// listen (see WithListen).
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// DiskFull reports whether the filesystem under the data directory filled up (another
// file took the space) and JetStream has not been reloaded since: the server then answers
// no publish to a stream that hit the error, so a Channel on this server fails its
// publishes at once with the reason instead of waiting for an acknowledgement that does
// not come. It turns false once 16 MiB are free again and JetStream is reloaded.
func (e *Embedded) DiskFull() bool { return e.heal.full.Load() }

// DataDir returns the directory the server stores its files under.
func (e *Embedded) DataDir() string { return e.dir }

// Shutdown stops the server, flushing and closing its stores, and waits for it to finish
// or ctx to end.
func (e *Embedded) Shutdown(ctx context.Context) error {
	e.heal.close()
	done := make(chan struct{})
	go func() {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("jetstream: embedded server shutdown: %w", ctx.Err())
	}
}

// serverLogger adapts slog to the nats-server Logger interface; onError also sees every
// error message (diskHeal watches them).
type serverLogger struct {
	l       *slog.Logger
	onError func(string)
}

func (s serverLogger) Noticef(f string, v ...any) {
	s.l.Info(fmt.Sprintf(f, v...), "component", "nats")
}
func (s serverLogger) Warnf(f string, v ...any) { s.l.Warn(fmt.Sprintf(f, v...), "component", "nats") }
func (s serverLogger) Fatalf(f string, v ...any) {
	s.l.Error(fmt.Sprintf(f, v...), "component", "nats")
}
func (s serverLogger) Errorf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	s.l.Error(msg, "component", "nats")
	if s.onError != nil {
		s.onError(msg)
	}
}
func (s serverLogger) Debugf(f string, v ...any) {
	s.l.Debug(fmt.Sprintf(f, v...), "component", "nats")
}
func (s serverLogger) Tracef(f string, v ...any) {}
