package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/channel/registry"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/internal/bytesize"
	"github.com/sluice-broker/sluice/internal/ratelog"
	"github.com/sluice-broker/sluice/internal/redact"
	"github.com/sluice-broker/sluice/source/ping"
)

// serveFlags are the flags of `sluice serve`.
type serveFlags struct {
	config          string
	addr            string
	maxEventBytes   bytesize.Size
	memoryLimit     bytesize.Size
	maxInflightBody bytesize.Size // 0: --memory-limit
	shutdownTimeout time.Duration
	publishTimeout  time.Duration
	maxInFlight     int
	dedupEntries    int
	reloadInterval  time.Duration
	logLevel        string
	logFormat       string
	pprof           bool
	denyEgress      delivery.DenyList
	channels        *registry.Registry // --channel and every backend's flags
	knative         knativeFlags       // --refs, --ref-url-template
	observe         observeFlags       // --otlp-endpoint, --trace-sample-ratio, /ui
	security        securityFlags      // TLS, server limits, sender identity (serve_security.go)
	dlq             dlqFlags           // --dlq-max-* (dlq.go)
	kube            kubeFlags          // --kubernetes (serve_kube.go)
	overload        overloadFlags      // --admit-wait, --reject-hold, --max-backlog, --max-storing, --fixed-in-flight (serve_overload.go)
}

func newServeCmd() *cobra.Command {
	f := serveFlags{
		maxEventBytes: broker.DefaultMaxEventBytes,
		memoryLimit:   registry.DefaultMemoryLimit,
		channels:      registry.New(),
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker",
		Long: `Run the broker: accept CloudEvents at POST /<namespace>/<broker> and deliver each one
to every trigger whose filter matches.

With no --config it serves one broker, default/default, on the memory channel with no
triggers. The config file (or directory of *.yaml files) holds Knative manifests: Broker,
Trigger, Channel, InMemoryChannel, KafkaChannel, Subscription, Sequence, Parallel,
PingSource and the ConfigMaps they name. Each object stands alone: one that is not ready
is logged and the rest run ('sluice status' lists them). Refs resolve to the objects of
the configuration, the --refs file, config-kreference-mapping, or (for a Service only)
--ref-url-template; any other ref is an error. The config and the refs file are watched
and reloaded without dropping events.

Runtime settings it makes: the Go memory limit is set from --memory-limit (× 1.5 +
64 MiB) unless GOMEMLIMIT is set, and 'sluice serve' re-executes itself once, same PID,
with GODEBUG=schedtrace=2147483647 added, which keeps the Go runtime's monitor out of
deep sleep and cuts CPU per event at moderate rates (docs/decisions/0010-sysmon-reexec.md);
GODEBUG=schedtrace=0 in the environment opts out.`,
		Example: `  sluice serve --config examples/demo.yaml
  curl -i http://127.0.0.1:8080/default/default -H 'ce-specversion: 1.0' -H 'ce-id: 1' \
       -H 'ce-source: /cli' -H 'ce-type: io.triggermesh.perf.drill' -d '{"hello":"world"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "Knative manifests: a YAML file or a directory of them (watched)")
	fl.StringVar(&f.addr, "addr", ":8080", "address to listen on")
	fl.Var(&f.maxEventBytes, "max-event-bytes", "largest request body accepted; larger ones get 413")
	fl.Var(&f.memoryLimit, "memory-limit", "bytes all memory channels may hold together; when full, ingress answers 429")
	fl.Var(&f.maxInflightBody, "max-inflight-body-bytes", "bytes the bodies of requests in progress may hold together, reserved before they are read; past it a request waits for room up to --read-timeout, then gets 503 (default: --memory-limit, at least --max-event-bytes; see docs/limits.md)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", broker.DefaultShutdownTimeout, "on SIGTERM, how long to deliver queued events before exiting")
	fl.DurationVar(&f.publishTimeout, "publish-timeout", broker.DefaultPublishTimeout, "how long ingress waits for a channel to store events before answering 503")
	fl.IntVar(&f.maxInFlight, "max-in-flight", delivery.DefaultMaxInFlight, "concurrent deliveries per trigger")
	fl.IntVar(&f.dedupEntries, "dedup-max-entries", broker.DefaultDedupEntries, "(source, id) pairs the dedup window of one broker (sluice.dev/dedup-window) remembers; past it the oldest are forgotten early (docs/dedup.md)")
	fl.DurationVar(&f.reloadInterval, "reload-interval", 250*time.Millisecond, "how often the config is checked for changes")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fl.Var(&f.denyEgress, "deny-egress", "networks deliveries may not connect to, checked on the resolved address (e.g. 169.254.0.0/16,fd00:ec2::254/128; see docs/security.md)")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ (for profiling under load)")
	f.channels.Flags(fl)
	f.knative.register(fl)
	f.observe.register(fl)
	f.security.register(fl)
	f.dlq.register(fl)
	f.kube.register(fl)
	f.overload.register(fl)
	return cmd
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func runServe(ctx context.Context, cmd *cobra.Command, f *serveFlags) error {
	log, err := newLogger(cmd.ErrOrStderr(), f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if err := f.security.check(cmd.Flags().Changed); err != nil {
		return err
	}
	if err := f.kube.check(cmd.Flags().Changed, f.config); err != nil {
		return err
	}
	if f.security.maxInflightBody = int64(f.maxInflightBody); f.maxInflightBody == 0 {
		f.security.maxInflightBody = max(int64(f.memoryLimit), int64(f.maxEventBytes))
	}
	if f.security.maxInflightBody < int64(f.maxEventBytes) {
		return fmt.Errorf("--max-inflight-body-bytes %d is less than --max-event-bytes %s: events between the two could never be accepted",
			f.security.maxInflightBody, f.maxEventBytes.String())
	}
	// Listen first: refs to the configuration's own brokers and channels resolve to
	// this address.
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", f.addr, err)
	}
	defer ln.Close() // on every early return; hs.Serve closes it too
	if err := checkDenyOwnIngress(f.denyEgress, ln.Addr().String()); err != nil {
		return err
	}
	clog := newConfigLog(log)
	cfg := config.Default()
	var cfgOpts []config.Option
	if f.config != "" {
		cfgOpts = f.knative.options(ingressBaseURL(f.security.scheme(), ln.Addr().String()))
		if cfg, err = config.Read([]string{f.config}, cfgOpts...); err != nil {
			return err
		}
		clog.report(cfg) // objects stand alone: a bad one is logged, the rest run
	}
	if f.kube.enabled { // nothing runs until the objects are read from the API server
		base := ingressBaseURL(f.security.scheme(), ln.Addr().String())
		if f.kube.addressURL != "" {
			base = f.kube.addressURL
		}
		cfgOpts = f.knative.options(base)
		if cfg, err = config.ReadDocuments(nil, cfgOpts...); err != nil {
			return err
		}
	}
	// Let the GC work harder before the heap outgrows what the queues may hold, unless
	// the user set GOMEMLIMIT: the queued bytes, half as much again for their garbage,
	// and 64 MiB for the rest (docs/decisions/0009-gogc-and-memory-limit.md).
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(f.memoryLimit)*3/2 + 64<<20)
	}

	reg := prometheus.NewRegistry() // what /metrics serves, gathered in sequence (gathered)
	gathered := gatherInSequence(reg)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := f.channels.Start(ctx, registry.WithLogger(log), registry.WithRegisterer(reg),
		registry.WithMemoryLimit(int64(f.memoryLimit)), registry.WithNamespaceShare(f.security.nsMemoryShare)); err != nil {
		return err
	}
	defer func() { // after the brokers have closed their channels
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := f.channels.Close(cctx); err != nil {
			log.Error("closing the channel backends", "err", err)
		}
	}()
	var srv *broker.Server // set below, before the dashboard's sampler starts
	obs, err := f.observe.start(log, gathered, func() map[string]string { return srv.NotReady() })
	if err != nil {
		return err
	}
	defer obs.close() // after the server has shut down: its last spans are exported
	secOpts, pingOpts, err := f.security.brokerOptions(ctx, ingressBaseURL(f.security.scheme(), ln.Addr().String()))
	if err != nil {
		return err
	}
	srv, err = broker.NewServer(append(secOpts,
		broker.WithChannelOpener(f.channels.Open),
		broker.WithLogger(log),
		broker.WithRegisterer(reg),
		broker.WithMaxEventBytes(int64(f.maxEventBytes)),
		broker.WithShutdownTimeout(f.shutdownTimeout),
		broker.WithPublishTimeout(f.publishTimeout),
		broker.WithMaxInFlight(f.maxInFlight),
		broker.WithTracer(obs.tracer),
		broker.WithDeadLetterHook(obs.ui.DeadLetter),
		broker.WithOverload(f.overload.opts), broker.WithDedupEntries(f.dedupEntries),
		broker.WithDenyEgress(f.denyEgress),
		broker.WithDLQ(f.dlq.limits()), broker.WithDLQMemoryLimit(f.dlq.memoryTotal(int64(f.memoryLimit))),
		broker.WithOpsGuarded(f.security.opsTokenFile != ""), // pause and resume need the token: 403 without the flag
	)...)
	if err != nil {
		return err
	}
	// With --kubernetes the first Apply is of the objects read once the informers have
	// synced: until then /readyz answers 503, and no pod takes events for Brokers it does
	// not know yet.
	if !f.kube.enabled {
		if err := srv.Apply(ctx, cfg); err != nil {
			log.Error("not every broker started; the others run (sluice status lists them)", "err", redact.Text(err.Error()))
		}
	}
	// PingSources send with the deliveries' client: the same --deny-egress, no redirects
	// followed, bounded response heads.
	pings, err := ping.New(append(pingOpts, ping.WithLogger(log),
		ping.WithClient(delivery.NewClient(delivery.WithDenyEgress(f.denyEgress))))...)
	if err != nil {
		srv.Shutdown(ctx)
		return err
	}
	defer pings.Close(context.Background()) // also before Shutdown, below
	if err := pings.Apply(cfg.PingSources); err != nil {
		log.Error("not every PingSource started", "err", redact.Text(err.Error()))
	}

	handler := routes(srv.Handler(), promhttp.HandlerFor(gathered, promhttp.HandlerOpts{Registry: reg}), f.pprof)
	handler = obs.withUI(handler) // GET /ui: the dashboard, ahead of ingress
	// Refused operator requests and failed TLS handshakes, at most once per
	// ratelog.Every each; closed once the servers have stopped (deferred before bg.Wait
	// below, so it runs after), writing the counts still pending.
	warn := ratelog.New(log)
	defer warn.Close()
	if handler, err = f.security.guardOps(handler, warn); err != nil { // --ops-token-file
		srv.Shutdown(ctx)
		return err
	}
	hs, plain, err := f.security.servers(ln, handler, srv.ConnContext, log, warn)
	if err != nil {
		srv.Shutdown(ctx)
		return err
	}
	if err := registerBodyBudget(reg, hs); err != nil {
		hs.Close()
		if plain != nil {
			plain.Close()
		}
		srv.Shutdown(ctx)
		return err
	}
	if f.kube.enabled {
		fmt.Fprintf(cmd.OutOrStdout(), "ingest: %s/<namespace>/<broker> (each Broker's status.address.url)\n", ingressBaseURL(hs.Scheme(), ln.Addr().String()))
	} else {
		printIngestURLs(cmd, hs.Scheme(), ln.Addr().String(), cfg)
	}
	log.Info("sluice serving", "addr", ln.Addr().String(), "brokers", len(cfg.Brokers), "memory_limit", f.memoryLimit.String())

	// runServe owns the config watcher, the dashboard's sampler and the HTTP servers (the
	// plain one with --plain-addr) and waits for them before it returns.
	var bg sync.WaitGroup
	defer bg.Wait()
	uiCtx, stopUI := context.WithCancel(context.Background())
	defer stopUI()
	bg.Go(func() { obs.ui.Run(uiCtx) }) // samples the metrics for GET /ui until serve returns
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// reload applies a configuration read again; initial is the first, already applied.
	reload := func(c *config.Config, initial bool) {
		clog.report(c)
		if err := pings.Apply(c.PingSources); err != nil {
			log.Error("not every PingSource started", "err", redact.Text(err.Error()))
		}
		switch err := srv.Apply(watchCtx, c); {
		case errors.Is(err, broker.ErrShutdown): // too late: shutting down
		case err != nil:
			log.Error("config reloaded with errors", "err", redact.Text(err.Error()))
		case !initial:
			log.Info("config reloaded", "brokers", len(c.Brokers))
		}
	}
	rejected := func(err error) {
		log.Error("config change rejected; keeping the running config", "err", redact.Text(err.Error()))
	}
	if f.config != "" {
		first := true // Watch first reports the config as it stands: already applied
		bg.Go(func() {
			config.Watch(watchCtx, f.config, f.reloadInterval, func(c *config.Config) {
				initial := first
				first = false
				reload(c, initial)
			}, rejected, append(cfgOpts, config.WithPrevious(cfg))...)
		})
	}
	kubeErr := make(chan error, 1)
	if f.kube.enabled {
		bg.Go(func() {
			kubeErr <- f.kube.watch(watchCtx, cfgOpts, srv.Status, func(c *config.Config) { reload(c, false) }, rejected, log)
		})
	}

	serveErr := make(chan error, 2)
	bg.Go(func() { serveErr <- hs.Serve() })
	if plain != nil {
		bg.Go(func() {
			if err := plain.Serve(); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		})
		defer plain.Close() // after hs's shutdown below, or on an early return
	}
	select {
	case err := <-serveErr:
		hs.Close() // the other server, if it was the plain one that failed
		stopWatch()
		srv.Shutdown(context.Background())
		return fmt.Errorf("serving: %w", err)
	case err := <-kubeErr:
		if err != nil { // nil: ctx is done, which the case below sees
			hs.Close()
			stopWatch()
			srv.Shutdown(context.Background())
			return err
		}
		<-ctx.Done()
	case <-ctx.Done():
	}

	log.Info("shutting down: refusing new events, delivering queued ones", "timeout", f.shutdownTimeout)
	stopWatch() // Shutdown refuses a reload anyway; this ends the watcher's goroutine
	pcctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	pings.Close(pcctx) // no more events from PingSources into brokers that are draining
	pcancel()
	dctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	left := srv.Shutdown(dctx)
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if err := hs.Shutdown(hctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("closing connections", "err", err)
	}
	if left > 0 {
		log.Error("shut down with events undelivered", "undelivered", left)
	} else {
		log.Info("shut down; every queued event was delivered")
	}
	return nil
}

// printIngestURLs tells the user where to send events.
func printIngestURLs(cmd *cobra.Command, scheme, addr string, cfg *config.Config) {
	base := ingressBaseURL(scheme, addr)
	var b strings.Builder
	for _, bc := range cfg.Brokers {
		fmt.Fprintf(&b, "ingest: %s/%s\n", base, bc.Key())
	}
	fmt.Fprint(cmd.OutOrStdout(), b.String())
}

// routes sends /metrics to the Prometheus handler, /debug/pprof/ to the profiler when
// enabled, and everything else to the ingress. A plain switch rather than a ServeMux:
// the mux's pattern matching costs allocations on every ingested event.
func routes(ingress, metrics http.Handler, withPprof bool) http.Handler {
	var prof *http.ServeMux
	if withPprof {
		prof = http.NewServeMux()
		prof.HandleFunc("/debug/pprof/", pprof.Index)
		prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
		prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/metrics":
			metrics.ServeHTTP(w, r)
		case prof != nil && strings.HasPrefix(r.URL.Path, "/debug/pprof/"):
			prof.ServeHTTP(w, r)
		default:
			ingress.ServeHTTP(w, r)
		}
	})
}
