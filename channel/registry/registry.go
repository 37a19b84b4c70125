// Package registry is the one place Sluice chooses a channel backend: it holds every
// backend's flags, checks them, prepares the backends they configure and opens each
// broker's channel on the backend it names. Nothing else names a backend: the broker
// sees only the channel interfaces (and the optional channel.Durable and
// channel.Admitter), through the opener Open.
//
//	reg := registry.New()
//	reg.Flags(cmd.Flags())                  // --channel, --data-dir, --kafka-brokers, ...
//	// ... flags parsed ...
//	err := reg.Start(ctx, registry.WithLogger(log), registry.WithRegisterer(prom),
//		registry.WithMemoryLimit(limit))
//	srv, err := broker.NewServer(broker.WithChannelOpener(reg.Open), ...)
//	// ... srv.Shutdown(ctx) closes the channels, then:
//	reg.Close(ctx)
//
// # Adding a backend
//
// A backend (Kinesis, say) touches only its own package and this one:
//
//  1. channel/kinesis returns a channel.Channel per broker; it implements
//     channel.Durable if stored events outlive the process (the broker then gives
//     Publish a timeout, stores dead letters in the channel, and keeps what is left at
//     shutdown), and channel.Admitter if it can refuse a request cheaply before its body
//     is read.
//  2. kinesis.go here: a type implementing backend — flags registers its flags (prefixed
//     with its name: --kinesis-region, ...); start checks them and, when they configure
//     it, prepares what its channels share (a client), reporting configured; open opens
//     one broker's channel; close releases what start made; needs names the flags that
//     configure it, for the error a broker naming an unconfigured backend gets; check
//     parses and validates the broker's config.Settings (its kinesis-stream annotation),
//     with errors naming the key, and refuses a key it does not read.
//  3. One line in backends below: {config.ChannelKinesis, &kinesisBackend{}}. Its name
//     is the value of the broker's sluice.dev/channel annotation and of --channel.
//
// The config package names the values the annotation may take (config.Channel*); a new
// backend's name must be added there for config.Load to accept it on a broker. config
// hands a backend its settings unparsed (config.Settings: the annotations, ConfigMap
// keys and spec fields it reads, keyed by where they were written); the backend's check
// is what gives them a meaning.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// backends lists every backend, in the order their flags and names are shown.
func backends() []entry {
	return []entry{
		{config.ChannelMemory, &memoryBackend{}},
		{config.ChannelJetStream, &jetstreamBackend{}},
		{config.ChannelKafka, newKafkaBackend()},
		{config.ChannelKinesis, &kinesisBackend{}},
		{config.ChannelRabbitMQ, newRabbitmqBackend()},
	}
}

// backend is one channel backend as the registry drives it.
type backend interface {
	// flags registers the backend's own flags on fs.
	flags(fs *pflag.FlagSet)
	// start checks the backend's flags and, when they configure it, prepares what its
	// channels share. It reports whether the backend is configured; open is called only
	// on a configured backend.
	start(ctx context.Context, env env) (configured bool, err error)
	// open opens the channel of broker b.
	open(ctx context.Context, b config.Broker) (channel.Channel, error)
	// close releases what start prepared, once every channel is closed.
	close(ctx context.Context) error
	// needs names what configures the backend: "--kafka-brokers HOST:PORT[,HOST:PORT]".
	needs() string
	// check parses and validates a broker's settings, before anything is opened: an error
	// names the key at fault (and a key the backend does not read).
	check(s config.Settings) error
	// given reports whether the flags that configure the backend were given, as start
	// would see them, without starting anything.
	given() bool
}

// env is what the registry hands every backend at start.
type env struct {
	log         *slog.Logger
	reg         prometheus.Registerer
	memoryLimit int64
	nsShare     float64
}

type entry struct {
	name string
	b    backend
}

// DefaultMemoryLimit is the memory channels' shared byte budget when WithMemoryLimit is
// not given: the memory channel's own default.
const DefaultMemoryLimit = memory.DefaultLimit

// Option configures a Registry; pass options to Start.
type Option func(*options)

type options struct {
	logger      *slog.Logger
	registerer  prometheus.Registerer
	memoryLimit int64
	nsShare     float64
}

// WithLogger sets the logger of the registry and its backends. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer registers the backends' metrics with reg: the memory channels' budget
// (sluice_queue_bytes, sluice_queue_bytes_limit) and each durable channel's own. Default:
// none.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.registerer = reg } }

// WithMemoryLimit sets the bytes all memory channels may hold together; when it is
// reached their Publish fails with channel.ErrFull. Default DefaultMemoryLimit.
func WithMemoryLimit(n int64) Option { return func(o *options) { o.memoryLimit = n } }

// WithNamespaceShare bounds the memory channels of one namespace together to a fraction
// f (0 < f ≤ 1) of the memory limit, so that a namespace whose events pile up answers
// 429 while the others still have room. Default 1: one budget shared by all.
func WithNamespaceShare(f float64) Option { return func(o *options) { o.nsShare = f } }

// Registry holds Sluice's channel backends. Create it with New, register its flags with
// Flags before they are parsed, then Start it; Open is the broker's ChannelOpener. Its
// methods are safe for concurrent use.
type Registry struct {
	backends []entry
	def      string // --channel

	mu         sync.Mutex
	started    bool
	closed     bool
	configured map[string]bool
}

// New returns a registry of every backend, none started. Its options are given to Start:
// the flags it registers must exist before they are parsed, the logger and metrics
// registry they configure only after.
func New() *Registry {
	return &Registry{backends: backends(), def: config.ChannelMemory}
}

// Names returns the backends' names: the values of --channel and of a broker's
// sluice.dev/channel annotation.
func (r *Registry) Names() []string {
	names := make([]string, len(r.backends))
	for i, e := range r.backends {
		names[i] = e.name
	}
	return names
}

// Flags registers --channel and every backend's flags on fs.
func (r *Registry) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&r.def, "channel", r.def, "channel of brokers without a sluice.dev/channel annotation: "+strings.Join(r.Names(), ", "))
	for _, e := range r.backends {
		e.b.flags(fs)
	}
}

// Start checks the options and flags and prepares every backend the flags configure
// (starts the embedded NATS server, connects...). An unknown --channel, or one naming a
// backend its flags do not configure, is an error naming the flag. On error nothing is
// left running.
func (r *Registry) Start(ctx context.Context, opts ...Option) error {
	o := options{memoryLimit: DefaultMemoryLimit, nsShare: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.memoryLimit <= 0 {
		return fmt.Errorf("registry: WithMemoryLimit(%d): want > 0", o.memoryLimit)
	}
	if !(o.nsShare > 0 && o.nsShare <= 1) {
		return fmt.Errorf("registry: WithNamespaceShare(%v): want a fraction above 0, at most 1", o.nsShare)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("registry: Start called twice")
	}
	def, ok := r.lookup(r.def)
	if !ok {
		return fmt.Errorf("--channel %q: %s", r.def, r.unknown())
	}
	e := env{log: o.logger, reg: o.registerer, memoryLimit: o.memoryLimit, nsShare: o.nsShare}
	configured := make(map[string]bool, len(r.backends))
	for i, be := range r.backends {
		ok, err := be.b.start(ctx, e)
		if err != nil {
			r.closeFirst(ctx, i, configured)
			return fmt.Errorf("%s channel: %w", be.name, err)
		}
		configured[be.name] = ok
	}
	if !configured[def.name] {
		r.closeFirst(ctx, len(r.backends), configured)
		return fmt.Errorf("--channel %s needs %s", def.name, def.b.needs())
	}
	r.started, r.configured = true, configured
	return nil
}

// closeFirst closes the first n backends that start configured, after a failed Start.
func (r *Registry) closeFirst(ctx context.Context, n int, configured map[string]bool) {
	for i := n - 1; i >= 0; i-- {
		if be := r.backends[i]; configured[be.name] {
			_ = be.b.close(ctx)
		}
	}
}

func (r *Registry) lookup(name string) (entry, bool) {
	for _, e := range r.backends {
		if e.name == name {
			return e, true
		}
	}
	return entry{}, false
}

func (r *Registry) unknown() string {
	return "unknown channel backend; known: " + strings.Join(r.Names(), ", ")
}

// Open opens the channel of broker b on the backend it names (b.Channel), or on
// --channel's when it names none. It is broker.ChannelOpener. An unknown backend, or
// one the flags do not configure, is an error saying which flag is needed.
func (r *Registry) Open(ctx context.Context, b config.Broker) (channel.Channel, error) {
	name := b.Channel
	if name == config.ChannelDefault {
		name = r.def
	}
	e, ok := r.lookup(name)
	if !ok {
		return nil, fmt.Errorf("channel backend %q: %s", name, r.unknown())
	}
	if err := e.b.check(b.Settings); err != nil {
		return nil, fmt.Errorf("the %s channel's settings: %w", name, err)
	}
	r.mu.Lock()
	started, closed, configured := r.started, r.closed, r.configured[name]
	r.mu.Unlock()
	switch {
	case !started:
		return nil, errors.New("registry: Open before Start")
	case closed:
		return nil, fmt.Errorf("registry: closed: %w", channel.ErrClosed)
	case !configured && !standalone(e.b, b):
		return nil, fmt.Errorf("the %s channel needs %s", name, e.b.needs())
	}
	if b.Retention > 0 && !retains(name) {
		return nil, fmt.Errorf("metadata.annotations.sluice.dev/retention: not on the %s channel: it keeps no event once delivered; retention and replay need the jetstream, kafka or kinesis channel", name)
	}
	return e.b.open(ctx, b)
}

// retains reports whether the backend called name keeps events once delivered, for
// sluice.dev/retention and replay (its channels are channel.Replayers).
func retains(name string) bool {
	switch name {
	case config.ChannelJetStream, config.ChannelKafka, config.ChannelKinesis:
		return true
	}
	return false
}

// standalone reports whether backend be can open b's channel without its flags: b
// names everything it needs itself (a Kafka broker's bootstrap.servers).
func standalone(be backend, b config.Broker) bool {
	s, ok := be.(interface{ standalone(config.Broker) bool })
	return ok && s.standalone(b)
}

// onlyKeys returns an error naming the first key of s (in sorted order) that is not
// among known: a setting the backend does not read, which would otherwise be ignored.
func onlyKeys(s config.Settings, known ...string) error {
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if !slices.Contains(known, k) {
			return fmt.Errorf("%s: not read by this backend", k)
		}
	}
	return nil
}

// Needs returns what configures the backend broker b runs on (b.Channel, or --channel's
// when it names none) when the parsed flags do not, as Open would refuse it: "" when
// they do, or b needs none. It starts nothing: `sluice validate` uses it to say which
// objects' readiness depends on a flag it was not given. An unknown --channel, or one
// its flags do not configure, is the error Start returns.
func (r *Registry) Needs(b config.Broker) (string, error) {
	def, ok := r.lookup(r.def)
	if !ok {
		return "", fmt.Errorf("--channel %q: %s", r.def, r.unknown())
	}
	if !def.b.given() {
		return "", fmt.Errorf("--channel %s needs %s", def.name, def.b.needs())
	}
	name := b.Channel
	if name == config.ChannelDefault {
		name = r.def
	}
	e, ok := r.lookup(name)
	if !ok || e.b.given() || standalone(e.b, b) {
		return "", nil // an unknown backend is the configuration's error (config.Load)
	}
	return e.b.needs(), nil
}

// Close releases the backends in the reverse order of their start: the embedded NATS
// server stops, connections close. Close the brokers' channels first (broker.Server's
// Shutdown does). It returns every backend's error, joined.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.closed {
		return nil
	}
	r.closed = true
	var errs []error
	for i := len(r.backends) - 1; i >= 0; i-- {
		if be := r.backends[i]; r.configured[be.name] {
			if err := be.b.close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s channel: %w", be.name, err))
			}
		}
	}
	return errors.Join(errs...)
}
