// Package ping runs Knative PingSources: on every tick of a source's cron schedule it
// posts one CloudEvent in binary mode to the source's sink, the way Knative's ping
// adapter sends it — type dev.knative.sources.ping, source
// /apis/v1/namespaces/<namespace>/pingsources/<name>, a fresh UUID as id, the tick's
// time, spec.data (or spec.dataBase64 decoded) as data with spec.contentType, and
// spec.ceOverrides.extensions.
//
// A Runner owns the cron scheduler and every send in progress; Apply follows
// configuration reloads (a changed source is rescheduled, a removed one stops) and
// Close stops it all and waits. A send that fails (a network error, a timeout, 429 or
// a 5xx) is retried with exponential backoff, at most Retries times and never past the
// next tick; the outcome is logged.
package ping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/redact"
)

// EventType is the type of every event a PingSource sends.
const EventType = "dev.knative.sources.ping"

// Defaults of the options.
const (
	DefaultRetries = 3
	DefaultDelay   = 200 * time.Millisecond
	DefaultTimeout = 10 * time.Second
)

// Option configures a Runner; pass options to New.
type Option func(*options)

type options struct {
	logger  *slog.Logger
	client  *http.Client
	retries int
	delay   time.Duration
	timeout time.Duration
	seconds bool
	own     *url.URL                           // WithOwnIngress
	ownAuth func(src config.PingSource) string // WithOwnIngress
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithClient sets the HTTP client that posts the events. Default: a client of its own.
func WithClient(c *http.Client) Option { return func(o *options) { o.client = c } }

// WithRetries sets how many times a failed send is retried, first after delay, then
// doubling. Default DefaultRetries, DefaultDelay.
func WithRetries(n int, delay time.Duration) Option {
	return func(o *options) { o.retries, o.delay = n, delay }
}

// WithTimeout bounds each attempt. Default DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithSecondsField reads schedules with a leading seconds field (six fields: "*/2 * * *
// * *" fires every two seconds) instead of Knative's five. Knative has no such field;
// it is for tests that cannot wait a minute for a tick.
func WithSecondsField() Option { return func(o *options) { o.seconds = true } }

// WithOwnIngress sends authorization(src) as the Authorization header of the events
// src posts to a sink at origin ("scheme://host:port": Sluice's own ingress, with sender
// identity on): the PingSource's own identity, as Knative's PingSource sends its OIDC
// token. Sinks elsewhere get none. Default: none.
func WithOwnIngress(origin string, authorization func(src config.PingSource) string) Option {
	return func(o *options) {
		if u, err := url.Parse(origin); err == nil && u.Host != "" {
			o.own, o.ownAuth = u, authorization
		}
	}
}

// authorization is the Authorization header of src's events to its sink; "" for none.
func (o *options) authorization(src config.PingSource) string {
	if o.own == nil {
		return ""
	}
	u, err := url.Parse(src.Sink)
	if err != nil || u.Scheme != o.own.Scheme || u.Host != o.own.Host {
		return ""
	}
	return o.ownAuth(src)
}

// Runner schedules and sends the events of a set of PingSources. Its methods are safe
// for concurrent use.
type Runner struct {
	opts   options
	parser cron.Parser
	cron   *cron.Cron
	life   context.Context
	end    context.CancelFunc
	sends  sync.WaitGroup // every send in progress

	mu      sync.Mutex
	closed  bool
	running map[string]entry // by namespace/name
}

type entry struct {
	src config.PingSource
	id  cron.EntryID
}

// New returns a started Runner with no sources; it returns an error naming an invalid
// option.
func New(opts ...Option) (*Runner, error) {
	o := options{retries: DefaultRetries, delay: DefaultDelay, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.retries < 0:
		return nil, fmt.Errorf("ping: WithRetries(%d, …): want ≥ 0", o.retries)
	case o.delay <= 0:
		return nil, fmt.Errorf("ping: WithRetries(…, %v): want a positive delay", o.delay)
	case o.timeout <= 0:
		return nil, fmt.Errorf("ping: WithTimeout(%v): want > 0", o.timeout)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.client == nil {
		o.client = &http.Client{}
	}
	fields := cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor
	if o.seconds {
		fields |= cron.Second
	}
	r := &Runner{opts: o, parser: cron.NewParser(fields), running: map[string]entry{}}
	r.cron = cron.New(cron.WithParser(r.parser),
		cron.WithLogger(cron.PrintfLogger(slog.NewLogLogger(o.logger.Handler(), slog.LevelError))))
	r.life, r.end = context.WithCancel(context.Background())
	r.cron.Start()
	return r, nil
}

// Apply makes srcs the running sources: new ones are scheduled, changed ones
// rescheduled, removed ones stopped (a send in progress finishes). A source whose
// schedule does not parse is skipped and returned in the error; the rest apply.
func (r *Runner) Apply(srcs []config.PingSource) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("ping: Apply after Close")
	}
	want := make(map[string]bool, len(srcs))
	var errs []error
	for _, s := range srcs {
		key := s.Key()
		want[key] = true
		if old, ok := r.running[key]; ok {
			if old.src.Equal(s) {
				continue
			}
			r.cron.Remove(old.id)
			delete(r.running, key)
		}
		sched, err := r.parser.Parse(s.Schedule)
		if err != nil {
			errs = append(errs, fmt.Errorf("ping: PingSource %s: schedule %q: %w", key, s.Schedule, err))
			continue
		}
		src := s
		id := r.cron.Schedule(sched, cron.FuncJob(func() { r.fire(src, sched) }))
		r.running[key] = entry{src: s, id: id}
		r.opts.logger.Info("ping source scheduled", "pingsource", key, "schedule", s.Schedule, "sink", redact.URL(s.Sink),
			"next", sched.Next(time.Now()).Format(time.RFC3339))
	}
	for key, e := range r.running {
		if !want[key] {
			r.cron.Remove(e.id)
			delete(r.running, key)
			r.opts.logger.Info("ping source removed", "pingsource", key)
		}
	}
	return errors.Join(errs...)
}

// Close stops scheduling, ends the sends in progress when ctx ends (it lets them finish
// until then) and waits for them.
func (r *Runner) Close(ctx context.Context) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	stopped := r.cron.Stop() // no new ticks; done when running jobs return
	stop := context.AfterFunc(ctx, r.end)
	defer stop()
	<-stopped.Done()
	r.sends.Wait()
	r.end()
}

// fire sends one event of src, retrying until the next tick at the latest.
func (r *Runner) fire(src config.PingSource, sched cron.Schedule) {
	r.sends.Add(1)
	defer r.sends.Done()
	now := time.Now()
	deadline := sched.Next(now)
	ctx, cancel := context.WithDeadline(r.life, deadline)
	defer cancel()
	e := Event(src, now)
	authz := r.opts.authorization(src)
	delay := r.opts.delay
	var err error
	for attempt := 0; ; attempt++ {
		var retry bool
		retry, err = r.send(ctx, src.Sink, e, authz)
		if err == nil {
			r.opts.logger.Debug("ping sent", "pingsource", src.Key(), "id", e.ID)
			return
		}
		if !retry || attempt >= r.opts.retries {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
			delay *= 2
			continue
		}
		break
	}
	r.opts.logger.Error("ping not delivered", "pingsource", src.Key(), "sink", redact.URL(src.Sink), "id", e.ID, "err", err)
}

// Event is the event src sends at t.
func Event(src config.PingSource, t time.Time) *event.Event {
	e := &event.Event{
		SpecVersion: event.SpecVersion, ID: uuid.NewString(), Source: src.EventSource(), Type: EventType,
		Time: t.UTC().Format(time.RFC3339Nano), DataContentType: src.ContentType, Data: src.Data,
	}
	for _, k := range sortedKeys(src.Extensions) {
		e.Extensions = append(e.Extensions, event.Extension{Name: k, Value: src.Extensions[k]})
	}
	return e
}

// send makes one attempt; retry says whether a failure is worth another.
func (r *Runner) send(ctx context.Context, sink string, e *event.Event, authz string) (retry bool, err error) {
	actx, cancel := context.WithTimeout(ctx, r.opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, sink, bytes.NewReader(e.Data))
	if err != nil {
		return false, err
	}
	event.WriteHeaders(req.Header, e)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := r.opts.client.Do(req)
	if err != nil {
		return ctx.Err() == nil, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 || resp.StatusCode == http.StatusNotFound:
		return true, fmt.Errorf("sink answered %s", resp.Status)
	}
	return false, fmt.Errorf("sink answered %s", resp.Status)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
