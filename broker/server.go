package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
)

// ChannelFactory opens the channel of a broker. backend is the broker's
// `sluice.dev/channel` choice, or the server's default when the broker names none.
type ChannelFactory func(ctx context.Context, backend string, b config.Broker) (channel.Channel, error)

// Option configures a Server.
type Option func(*options)

type options struct {
	maxEventBytes   int64
	memoryLimit     int64
	shutdownTimeout time.Duration
	publishTimeout  time.Duration
	maxInFlight     int
	fixedInFlight   bool
	defaultChannel  string
	factory         ChannelFactory
	logger          *slog.Logger
	registry        prometheus.Registerer
	client          *http.Client
}

// Defaults of the server's options.
const (
	DefaultMaxEventBytes   = 1 << 20
	DefaultMemoryLimit     = 64 << 20
	DefaultShutdownTimeout = 30 * time.Second
	DefaultPublishTimeout  = 5 * time.Second
	DefaultMaxInFlight     = 256
)

// WithMaxEventBytes bounds a request body; larger ones get 413. Default 1 MiB.
func WithMaxEventBytes(n int64) Option { return func(o *options) { o.maxEventBytes = n } }

// WithMemoryLimit bounds the bytes all memory channels hold together; when it is reached
// ingress answers 429. Default 64 MiB.
func WithMemoryLimit(n int64) Option { return func(o *options) { o.memoryLimit = n } }

// WithShutdownTimeout bounds how long Shutdown, and the removal of a trigger, wait for
// queued events to be delivered. Default 30 s.
func WithShutdownTimeout(d time.Duration) Option { return func(o *options) { o.shutdownTimeout = d } }

// WithPublishTimeout bounds how long ingress waits for a channel to store a request's
// events before answering 503. Default 5 s.
func WithPublishTimeout(d time.Duration) Option { return func(o *options) { o.publishTimeout = d } }

// WithMaxInFlight bounds the concurrent deliveries of one trigger. Default 256.
func WithMaxInFlight(n int) Option { return func(o *options) { o.maxInFlight = n } }

// WithFixedInFlight turns off the adaptive (AIMD) in-flight limit toward subscribers:
// every trigger keeps MaxInFlight attempts in flight whatever the subscriber answers.
func WithFixedInFlight(fixed bool) Option { return func(o *options) { o.fixedInFlight = fixed } }

// WithDefaultChannel names the backend of brokers that choose none. Default "memory".
func WithDefaultChannel(name string) Option { return func(o *options) { o.defaultChannel = name } }

// WithChannelFactory opens the channels of backends other than memory.
func WithChannelFactory(f ChannelFactory) Option { return func(o *options) { o.factory = f } }

// WithLogger sets the logger. Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithRegisterer registers the server's metrics with reg. Default: a private registry.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.registry = reg } }

// WithClient sets the HTTP client of every dispatcher. Default delivery.NewClient().
func WithClient(c *http.Client) Option { return func(o *options) { o.client = c } }

// Server runs the brokers of one configuration: their ingress, channels and dispatchers.
// It is safe for concurrent use; Apply may run while requests are served.
type Server struct {
	opts            options
	log             *slog.Logger
	budget          *memory.Budget
	client          *http.Client
	metrics         *Metrics
	deliveryMetrics *delivery.Metrics

	brokers  atomic.Pointer[map[string]*Broker]
	applyMu  sync.Mutex
	ingestMu sync.RWMutex // held for reading while a request stores events
	draining atomic.Bool
	ready    atomic.Bool
}

// NewServer returns a server with no brokers; call Apply with a configuration.
func NewServer(opts ...Option) *Server {
	o := options{
		maxEventBytes: DefaultMaxEventBytes, memoryLimit: DefaultMemoryLimit,
		shutdownTimeout: DefaultShutdownTimeout, publishTimeout: DefaultPublishTimeout,
		maxInFlight: DefaultMaxInFlight, defaultChannel: "memory",
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	if o.client == nil {
		o.client = delivery.NewClient()
	}
	s := &Server{
		opts: o, log: o.logger, budget: memory.NewBudget(o.memoryLimit), client: o.client,
		metrics: NewMetrics(o.registry), deliveryMetrics: delivery.NewMetrics(o.registry),
	}
	o.registry.MustRegister(newQueueCollector(s))
	empty := map[string]*Broker{}
	s.brokers.Store(&empty)
	return s
}

func (s *Server) lookup(key string) *Broker { return (*s.brokers.Load())[key] }

// snapshot returns the brokers sorted by key.
func (s *Server) snapshot() []*Broker {
	m := *s.brokers.Load()
	bs := make([]*Broker, 0, len(m))
	for _, b := range m {
		bs = append(bs, b)
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].key < bs[j].key })
	return bs
}

func (s *Server) openChannel(ctx context.Context, bc config.Broker) (channel.Channel, error) {
	backend := bc.Channel
	if backend == "" {
		backend = s.opts.defaultChannel
	}
	if backend == "memory" {
		return memory.New(memory.WithBudget(s.budget)), nil
	}
	if s.opts.factory == nil {
		return nil, fmt.Errorf("channel backend %q is not configured on this server", backend)
	}
	return s.opts.factory(ctx, backend, bc)
}

// Apply makes cfg the running configuration: brokers and triggers are added, updated or
// removed. Removed triggers and brokers drain their queues in the background. An error
// names what could not be applied; the rest is applied.
func (s *Server) Apply(ctx context.Context, cfg *config.Config) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	old := *s.brokers.Load()
	next := make(map[string]*Broker, len(cfg.Brokers))
	var errs []error
	for _, bc := range cfg.Brokers {
		key := bc.Key()
		b := old[key]
		if b != nil && b.cfg.Channel != bc.Channel {
			errs = append(errs, fmt.Errorf("broker %s: changing the channel backend (%q → %q) needs a restart; keeping %q",
				key, b.cfg.Channel, bc.Channel, b.cfg.Channel))
			bc.Channel = b.cfg.Channel
		}
		if b == nil {
			ch, err := s.openChannel(ctx, bc)
			if err != nil {
				errs = append(errs, fmt.Errorf("broker %s: %w", key, err))
				continue
			}
			_, isMemory := ch.(*memory.Channel)
			b = &Broker{
				isMemory: isMemory,
				key:      key, isKnBr: bc.Kind == "" || bc.Kind == "Broker", ch: ch, srv: s,
				log: s.log, pubWait: s.opts.publishTimeout, triggers: map[string]*trigger{},
				m: s.metrics.forBroker(key),
			}
			s.log.Info("broker started", "broker", key, "channel", backendName(bc.Channel, s.opts.defaultChannel))
		}
		if err := b.apply(ctx, bc); err != nil {
			errs = append(errs, fmt.Errorf("broker %s: %w", key, err))
		}
		next[key] = b
	}
	s.brokers.Store(&next)
	for key, b := range old {
		if _, ok := next[key]; !ok {
			go func() {
				dctx, cancel := context.WithTimeout(context.Background(), s.opts.shutdownTimeout)
				defer cancel()
				if left := b.drain(dctx); left > 0 {
					s.log.Error("broker removed before its queues drained", "broker", key, "undelivered", left)
				}
				s.log.Info("broker removed", "broker", key)
			}()
		}
	}
	s.ready.Store(true)
	return errors.Join(errs...)
}

func backendName(b, def string) string {
	if b == "" {
		return def
	}
	return b
}

// Shutdown stops accepting events (ingress answers 503), delivers what is queued until
// ctx ends, then stops every dispatcher and closes the channels. It returns the number of
// events left undelivered (logged by the dispatchers).
func (s *Server) Shutdown(ctx context.Context) int {
	s.draining.Store(true)
	s.ready.Store(false)
	// Taking the write lock waits out every request that is storing events now.
	s.ingestMu.Lock()
	//lint:ignore SA2001 the lock is the wait; nothing needs doing under it
	s.ingestMu.Unlock()
	var left atomic.Int64
	var wg sync.WaitGroup
	for _, b := range s.snapshot() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			left.Add(int64(b.drain(ctx)))
		}()
	}
	wg.Wait()
	return int(left.Load())
}
