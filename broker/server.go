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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/internal/ratelog"
	"github.com/sluice-broker/sluice/overload"
)

// ErrShutdown is returned by Apply once Shutdown has begun.
var ErrShutdown = errors.New("broker: the server is shut down; the configuration was not applied")

// Server runs the brokers of one configuration: their ingress, channels and dispatchers.
// It is safe for concurrent use; Apply may run while requests are served.
//
// Goroutines: the Server owns the retirements of the brokers a reload removed; each
// Broker owns its triggers' dispatchers and the retirements of the triggers a reload
// removed; each delivery.Dispatcher owns its workers. Shutdown waits for all of them.
type Server struct {
	opts            options
	log             *slog.Logger
	client          *http.Client
	metrics         *Metrics
	deliveryMetrics *delivery.Metrics
	ovl             *overload.Control // overload control: each broker's Gate, the holds after a 429

	brokers  atomic.Pointer[map[string]*Broker]
	ingestMu sync.RWMutex // held for reading while a request stores events
	draining atomic.Bool
	ready    atomic.Bool
	arrival  arrivalClock            // knativearrivaltime stamps
	applied  atomic.Pointer[applied] // what Status reports

	// life is the parent of every dispatcher's and retirement's context: Shutdown cancels
	// it when its own context ends, so that nothing outlives its deadline.
	life    context.Context
	end     context.CancelFunc
	removed retirements // brokers a reload removed, draining

	dlqMemory dlq.Store  // the dead-letter store of brokers whose channel keeps none (dlq.go)
	dlqm      dlqMetrics // its metrics

	applyMu sync.Mutex // serialises Apply and Shutdown
	closed  bool       // Shutdown has begun (guarded by applyMu)
}

// NewServer returns a server with no brokers; call Apply with a configuration. It
// returns an error naming an invalid option; WithChannelOpener is required.
func NewServer(opts ...Option) (*Server, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	s := &Server{
		opts: o, log: o.logger, client: delivery.NewClient(delivery.WithDenyEgress(o.denyEgress)),
		metrics: NewMetrics(o.registry), deliveryMetrics: delivery.NewMetrics(o.registry),
	}
	s.life, s.end = context.WithCancel(context.Background())
	ovl, err := overload.New(o.overload, s.life.Done())
	if err != nil {
		s.end()
		return nil, fmt.Errorf("broker: WithOverload: %w", err)
	}
	s.ovl = ovl
	o.registry.MustRegister(newQueueCollector(s))
	s.dlqm = newDLQMetrics(o.registry)
	if lim, on := o.dlqLimits(); on {
		total := o.dlqMemory
		if total == 0 {
			total = dlq.DefaultMemoryTotal
		}
		mem, err := dlq.NewMemory(lim, dlq.WithTotalBytes(total))
		if err != nil {
			return nil, fmt.Errorf("broker: WithDLQ: %w", err)
		}
		s.dlqMemory = mem
	}
	empty := map[string]*Broker{}
	s.brokers.Store(&empty)
	return s, nil
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

// Apply makes cfg the running configuration: brokers and triggers are added, updated or
// removed. Removed triggers and brokers drain their queues in the background, for up to
// the shutdown timeout. An error names what could not be applied; the rest is applied.
// After Shutdown has begun, Apply applies nothing and returns ErrShutdown.
func (s *Server) Apply(ctx context.Context, cfg *config.Config) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.closed {
		return ErrShutdown
	}
	if s.opts.authorizer != nil { // before a new broker can be reached
		s.opts.authorizer.Apply(cfg)
	}
	old := *s.brokers.Load()
	next := make(map[string]*Broker, len(cfg.Brokers))
	var errs []error
	failed := map[string]error{} // for Status
	for _, bc := range cfg.Brokers {
		key := bc.Key()
		b := old[key]
		if b != nil && b.cfg.Channel != bc.Channel {
			errs = append(errs, fmt.Errorf("broker %s: changing the channel backend (%q → %q) needs a restart; keeping %q",
				key, b.cfg.Channel, bc.Channel, b.cfg.Channel))
			bc.Channel = b.cfg.Channel
		}
		if b != nil {
			if err := keepChannelSettings(&bc, b.cfg); err != nil {
				errs = append(errs, fmt.Errorf("broker %s: %w", key, err))
			}
			if bc.Retention != b.cfg.Retention { // replay.go
				errs = append(errs, fmt.Errorf("broker %s: changing sluice.dev/retention (%s → %s) needs a restart; keeping %s", key, b.cfg.Retention, bc.Retention, b.cfg.Retention))
				bc.Retention = b.cfg.Retention
			}
		}
		if b == nil {
			ch, err := s.opts.open(ctx, bc)
			if err != nil {
				failed[key] = err
				errs = append(errs, fmt.Errorf("broker %s: %w", key, err))
				continue
			}
			b = newBroker(s, bc, ch)
			s.log.Info("broker started", "broker", key, "durable", b.durable)
		}
		if err := b.apply(ctx, bc); err != nil {
			failed[key] = err
			errs = append(errs, fmt.Errorf("broker %s: %w", key, err))
		}
		next[key] = b
	}
	s.brokers.Store(&next)
	s.applied.Store(&applied{cfg: cfg, failed: failed})
	for key, b := range old {
		if _, ok := next[key]; !ok {
			s.removed.start(func() int {
				ctx, cancel := context.WithTimeout(s.life, s.opts.shutdownTimeout)
				defer cancel()
				left := b.drain(ctx)
				for _, t := range b.triggerList() {
					t.forget(s)
				}
				if left > 0 {
					s.log.Error("broker removed before its queues drained", "broker", key, "undelivered", left)
				} else {
					s.log.Info("broker removed", "broker", key)
				}
				return left
			})
		}
	}
	s.ready.Store(true)
	return errors.Join(errs...)
}

// Shutdown stops accepting events (ingress answers 503) and configurations (Apply
// returns ErrShutdown, waiting first for one in progress), delivers what is queued until
// ctx ends, then stops every dispatcher and closes the channels. It waits for every
// goroutine the server started, removals of triggers and brokers included.
//
// It returns the number of deliveries lost: events held or still queued on memory
// channels when their dispatchers stopped, counted once per trigger they were routed
// to, plus what the removals still in progress left. Events left in a durable channel
// are kept for redelivery after a restart and not counted. Calling Shutdown again
// returns 0.
func (s *Server) Shutdown(ctx context.Context) int {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.closed {
		return 0
	}
	s.closed = true
	s.draining.Store(true)
	s.ovl.Drain() // no more holds after a 429, nor waits for a connection's turn
	s.ready.Store(false)
	// Taking the write lock waits out every request that is storing events now.
	s.ingestMu.Lock()
	//lint:ignore SA2001 the lock is the wait; nothing needs doing under it
	s.ingestMu.Unlock()
	// What the retirements still running leave is Shutdown's to count, even those that
	// end when ctx does, before drain gets to wait for them.
	s.removed.claim()
	for _, b := range s.snapshot() {
		b.retiring.claim()
	}
	// When ctx ends, so does every retirement still delivering: nothing outlives the
	// deadline.
	stop := context.AfterFunc(ctx, s.end)
	defer stop()
	defer s.end()
	var left atomic.Int64
	var wg sync.WaitGroup
	for _, b := range s.snapshot() {
		wg.Go(func() { left.Add(int64(b.drain(ctx))) })
	}
	wg.Wait()
	n := int(left.Load()) + s.removed.wait()
	s.logLostDLQ() // dlq.go
	// Every dispatcher has returned: the delivery client's idle connections (and the
	// transport's janitor with them) go too.
	s.client.CloseIdleConnections()
	return n
}

// newBroker returns the broker of bc on ch, with no triggers yet.
func newBroker(s *Server, bc config.Broker, ch channel.Channel) *Broker {
	b := &Broker{
		key: bc.Key(), cfg: bc, isKnBr: bc.Kind == "" || bc.Kind == "Broker", ch: ch,
		durable: channel.IsDurable(ch), srv: s, log: s.log, triggers: map[string]*trigger{},
		m: s.metrics.forBroker(bc.Key()),
	}
	b.chName = "the server's default channel (--channel)"
	if bc.Channel != config.ChannelDefault {
		b.chName = "the " + bc.Channel + " channel"
	}
	b.refused = ratelog.New(s.log.With("broker", b.key))
	b.gate = s.ovl.Gate(b)
	if b.durable { // a memory channel never blocks: only a durable one gets a timeout
		b.pubWait = s.opts.publishTimeout
	}
	b.openDLQ(s.life)
	b.openPauses(s.life)
	b.startChecker(s.life)
	return b
}
