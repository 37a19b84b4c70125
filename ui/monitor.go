// Package ui is Sluice's live view: a Monitor samples the process's Prometheus metrics
// once a second into a Snapshot (rates, queue depth, in-flight limits, delivery latency
// percentiles, the last dead letters), which GET /ui/snapshot.json serves and both the
// page at GET /ui (embedded, no external resource) and `sluice top` draw.
//
// The snapshot is encoded once per sample and served as bytes, so a page or a top
// refreshing every second costs the broker next to nothing, and the request never waits
// on ingress work.
package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/internal/redact"
)

// Option configures a Monitor; see New.
type Option func(*options)

type options struct {
	gatherer    prometheus.Gatherer
	interval    time.Duration
	window      time.Duration
	latency     time.Duration
	rate        time.Duration
	deadLetters int
	notReady    func() map[string]string
}

// WithGatherer sets where the metrics are read from: the registry serve's /metrics
// serves. Required.
func WithGatherer(g prometheus.Gatherer) Option { return func(o *options) { o.gatherer = g } }

// WithInterval sets how often the metrics are sampled. Default 1 s.
func WithInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithWindow sets how far back the histories go. Default 5 minutes.
func WithWindow(d time.Duration) Option { return func(o *options) { o.window = d } }

// WithLatencyWindow sets the span of the P50 and P99 delivery latencies. Default 1 minute.
func WithLatencyWindow(d time.Duration) Option { return func(o *options) { o.latency = d } }

// WithRateWindow sets the span the rates are averaged over. Default 5 s.
func WithRateWindow(d time.Duration) Option { return func(o *options) { o.rate = d } }

// WithDeadLetters sets how many of the last dead letters are kept. Default 20.
func WithDeadLetters(n int) Option { return func(o *options) { o.deadLetters = n } }

// WithNotReady sets where the brokers that are not ready come from, with the reason of
// each, by name (the broker server's NotReady): every snapshot marks them. Default:
// every broker is ready.
func WithNotReady(f func() map[string]string) Option { return func(o *options) { o.notReady = f } }

// validate is the one place options are checked; the error names the option.
func (o *options) validate() error {
	switch {
	case o.gatherer == nil:
		return errors.New("ui: WithGatherer is required (the registry /metrics serves)")
	case o.interval <= 0:
		return fmt.Errorf("ui: WithInterval(%v): want > 0", o.interval)
	case o.window < o.interval:
		return fmt.Errorf("ui: WithWindow(%v): want at least the interval %v", o.window, o.interval)
	case o.latency < o.interval || o.latency > o.window:
		return fmt.Errorf("ui: WithLatencyWindow(%v): want from the interval %v to the window %v", o.latency, o.interval, o.window)
	case o.rate < o.interval || o.rate > o.window:
		return fmt.Errorf("ui: WithRateWindow(%v): want from the interval %v to the window %v", o.rate, o.interval, o.window)
	case o.deadLetters < 1:
		return fmt.Errorf("ui: WithDeadLetters(%d): want at least 1", o.deadLetters)
	}
	return nil
}

// Monitor samples the metrics and keeps the last dead letters. Create one with New, run
// it with Run, serve it with Handler. DeadLetter may be called from any goroutine.
type Monitor struct {
	o       options
	encoded atomic.Pointer[[]byte] // the last snapshot, JSON
	last    atomic.Pointer[Snapshot]

	dlMu    sync.Mutex
	dl      []delivery.DeadLetter // ring, next at dlNext
	dlNext  int
	dlTotal uint64

	// Owned by the sampling goroutine.
	samples []*sample // oldest first, at most window/interval+1
	brokers map[string]*Broker
	trigs   map[string]*Trigger
}

// New returns a monitor; it returns an error naming an invalid option.
func New(opts ...Option) (*Monitor, error) {
	o := options{interval: time.Second, window: 5 * time.Minute, latency: time.Minute, rate: 5 * time.Second, deadLetters: 20}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Monitor{o: o, brokers: map[string]*Broker{}, trigs: map[string]*Trigger{}}
	m.publish(&Snapshot{Time: time.Now(), IntervalSeconds: o.interval.Seconds(), Brokers: []Broker{}, Triggers: []Trigger{},
		DeadLetters: []delivery.DeadLetter{}})
	return m, nil
}

// DeadLetter records an event that was dead-lettered or undeliverable; it is the
// broker's dead-letter hook (broker.WithDeadLetterHook).
func (m *Monitor) DeadLetter(d delivery.DeadLetter) {
	d.Dest = redact.URL(d.Dest) // the dispatcher redacts it already; the page never shows a credential
	m.dlMu.Lock()
	defer m.dlMu.Unlock()
	m.dlTotal++
	if len(m.dl) < m.o.deadLetters {
		m.dl = append(m.dl, d)
		return
	}
	m.dl[m.dlNext] = d
	m.dlNext = (m.dlNext + 1) % len(m.dl)
}

// deadLetters returns the dead letters kept, newest first, and how many were seen.
func (m *Monitor) deadLetters() ([]delivery.DeadLetter, uint64) {
	m.dlMu.Lock()
	defer m.dlMu.Unlock()
	out := make([]delivery.DeadLetter, 0, len(m.dl))
	for i := range m.dl {
		out = append(out, m.dl[(m.dlNext+len(m.dl)-1-i)%len(m.dl)])
	}
	return out, m.dlTotal
}

// Run samples the metrics every interval until ctx ends. Call it once.
func (m *Monitor) Run(ctx context.Context) {
	tick := time.NewTicker(m.o.interval)
	defer tick.Stop()
	m.Sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			m.Sample(now)
		}
	}
}

// Snapshot returns the last snapshot. It must not be modified.
func (m *Monitor) Snapshot() *Snapshot { return m.last.Load() }

func (m *Monitor) publish(s *Snapshot) {
	b, err := json.Marshal(s)
	if err != nil { // cannot happen: no NaN or Inf reaches a snapshot
		b = []byte(`{"error":` + fmt.Sprintf("%q", err.Error()) + `}`)
	}
	m.last.Store(s)
	m.encoded.Store(&b)
}

// sample is the cumulative state of the metrics at one instant.
type sample struct {
	at       time.Time
	brokers  map[string]*brokerCum
	triggers map[string]*triggerCum
}

type brokerCum struct{ accepted, rejected float64 }

type triggerCum struct {
	broker                                  string
	delivered, failed, retries, dead, undel float64
	dlqStored                               float64
	depth, inflight, limit                  float64
	bounds, counts                          []float64 // latency histogram: upper bounds, cumulative counts
	count                                   float64   // observations (+Inf bucket)
}

// Sample reads the metrics once as of now and publishes a new snapshot. Run calls it
// every interval; tests may call it directly (not concurrently with Run).
func (m *Monitor) Sample(now time.Time) {
	cur := &sample{at: now, brokers: map[string]*brokerCum{}, triggers: map[string]*triggerCum{}}
	mfs, _ := m.o.gatherer.Gather() // a partial result on error is still worth showing
	for _, mf := range mfs {
		m.read(cur, mf)
	}
	max := int(m.o.window/m.o.interval) + 1
	m.samples = append(m.samples, cur)
	if len(m.samples) > max {
		m.samples = append(m.samples[:0], m.samples[len(m.samples)-max:]...)
	}
	m.publish(m.build(cur))
}

func (m *Monitor) broker(s *sample, name string) *brokerCum {
	b := s.brokers[name]
	if b == nil {
		b = &brokerCum{}
		s.brokers[name] = b
	}
	return b
}

func (m *Monitor) trigger(s *sample, name string) *triggerCum {
	t := s.triggers[name]
	if t == nil {
		t = &triggerCum{}
		s.triggers[name] = t
	}
	return t
}

func label(mt *dto.Metric, name string) string {
	for _, l := range mt.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// read adds one metric family to s.
func (m *Monitor) read(s *sample, mf *dto.MetricFamily) {
	for _, mt := range mf.GetMetric() {
		switch mf.GetName() {
		case "sluice_events_accepted_total":
			if b := label(mt, "broker"); b != "" {
				m.broker(s, b).accepted += mt.GetCounter().GetValue()
			}
		case "sluice_requests_rejected_total":
			if b := label(mt, "broker"); b != "" {
				m.broker(s, b).rejected += mt.GetCounter().GetValue()
			}
		case "sluice_queue_depth":
			t := m.trigger(s, label(mt, "trigger"))
			t.broker, t.depth = label(mt, "broker"), mt.GetGauge().GetValue()
			m.broker(s, t.broker)
		case "sluice_delivery_delivered_total":
			m.trigger(s, label(mt, "trigger")).delivered = mt.GetCounter().GetValue()
		case "sluice_delivery_attempts_total":
			if label(mt, "dest") == "subscriber" && label(mt, "result") != "2xx" {
				m.trigger(s, label(mt, "trigger")).failed += mt.GetCounter().GetValue()
			}
		case "sluice_delivery_retries_total":
			m.trigger(s, label(mt, "trigger")).retries = mt.GetCounter().GetValue()
		case "sluice_delivery_dead_lettered_total":
			m.trigger(s, label(mt, "trigger")).dead = mt.GetCounter().GetValue()
		case "sluice_delivery_undeliverable_total":
			m.trigger(s, label(mt, "trigger")).undel += mt.GetCounter().GetValue()
		case "sluice_dlq_stored_total":
			m.trigger(s, label(mt, "trigger")).dlqStored = mt.GetCounter().GetValue()
		case "sluice_delivery_inflight":
			m.trigger(s, label(mt, "trigger")).inflight = mt.GetGauge().GetValue()
		case "sluice_delivery_inflight_limit":
			m.trigger(s, label(mt, "trigger")).limit = mt.GetGauge().GetValue()
		case "sluice_delivery_latency_seconds":
			h := mt.GetHistogram()
			t := m.trigger(s, label(mt, "trigger"))
			t.count = float64(h.GetSampleCount())
			t.bounds, t.counts = t.bounds[:0], t.counts[:0]
			for _, b := range h.GetBucket() {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue
				}
				t.bounds = append(t.bounds, b.GetUpperBound())
				t.counts = append(t.counts, float64(b.GetCumulativeCount()))
			}
		}
	}
}

// back returns the sample d before the last one (the oldest there is if the history is
// shorter).
func (m *Monitor) back(d time.Duration) *sample {
	n := int(d / m.o.interval)
	i := max(len(m.samples)-1-n, 0)
	return m.samples[i]
}

// rate is the per-second increase of a counter from old to cur (0 after a reset).
func rate(cur, old float64, dt time.Duration) float64 {
	if dt <= 0 || cur < old {
		return 0
	}
	return (cur - old) / dt.Seconds()
}

// build computes the snapshot of the last sample, cur, and extends the histories.
func (m *Monitor) build(cur *sample) *Snapshot {
	prev := m.back(m.o.interval)
	old := m.back(m.o.rate)
	lat := m.back(m.o.latency)
	short := m.back(10 * time.Second)
	keep := int(m.o.window/m.o.interval) + 1
	ms := cur.at.UnixMilli()
	s := &Snapshot{Time: cur.at, IntervalSeconds: m.o.interval.Seconds(), RateSeconds: cur.at.Sub(old.at).Seconds(),
		LatencySeconds: cur.at.Sub(lat.at).Seconds(), WindowSeconds: m.o.window.Seconds(),
		Brokers: []Broker{}, Triggers: []Trigger{}}

	for name := range m.brokers {
		if cur.brokers[name] == nil {
			delete(m.brokers, name)
		}
	}
	for name, c := range cur.brokers {
		b := m.brokers[name]
		if b == nil {
			b = &Broker{Name: name}
			m.brokers[name] = b
		}
		o, p := old.brokers[name], prev.brokers[name]
		if o == nil {
			o = &brokerCum{}
		}
		if p == nil {
			p = c // new: no rate yet
		}
		b.AcceptedTotal, b.RejectedTotal = c.accepted, c.rejected
		b.IngressRate = rate(c.accepted, o.accepted, cur.at.Sub(old.at))
		b.RejectedRate = rate(c.rejected, o.rejected, cur.at.Sub(old.at))
		h := &b.History
		h.T = appendKeep(h.T, ms, keep)
		h.Ingress = appendKeep(h.Ingress, rate(c.accepted, p.accepted, cur.at.Sub(prev.at)), keep)
		h.Rejected = appendKeep(h.Rejected, rate(c.rejected, p.rejected, cur.at.Sub(prev.at)), keep)
		s.Brokers = append(s.Brokers, copyBroker(b))
	}

	for name := range m.trigs {
		if cur.triggers[name] == nil {
			delete(m.trigs, name)
		}
	}
	for name, c := range cur.triggers {
		t := m.trigs[name]
		if t == nil {
			t = &Trigger{Name: name}
			m.trigs[name] = t
		}
		o, p, l, sh := old.triggers[name], prev.triggers[name], lat.triggers[name], short.triggers[name]
		if o == nil {
			o = &triggerCum{}
		}
		if p == nil {
			p = c
		}
		t.Broker = c.broker
		t.DeliveredTotal, t.FailedTotal, t.RetriesTotal = c.delivered, c.failed, c.retries
		t.DeadLetteredTotal, t.UndeliverableTotal, t.DLQStoredTotal = c.dead, c.undel, c.dlqStored
		t.DeliveryRate = rate(c.delivered, o.delivered, cur.at.Sub(old.at))
		t.FailureRate = rate(c.failed, o.failed, cur.at.Sub(old.at))
		t.QueueDepth, t.InFlight, t.InFlightLimit = c.depth, c.inflight, c.limit
		t.P50, t.P99 = quantile(0.5, c, l), quantile(0.99, c, l)
		h := &t.History
		h.T = appendKeep(h.T, ms, keep)
		h.Delivered = appendKeep(h.Delivered, rate(c.delivered, p.delivered, cur.at.Sub(prev.at)), keep)
		h.Failed = appendKeep(h.Failed, rate(c.failed, p.failed, cur.at.Sub(prev.at)), keep)
		h.Depth = appendKeep(h.Depth, c.depth, keep)
		h.Limit = appendKeep(h.Limit, c.limit, keep)
		h.P50 = appendKeep(h.P50, quantile(0.5, c, sh), keep)
		h.P99 = appendKeep(h.P99, quantile(0.99, c, sh), keep)
		s.Triggers = append(s.Triggers, copyTrigger(t))
	}
	m.markReady(s)
	sort.Slice(s.Brokers, func(i, j int) bool { return s.Brokers[i].Name < s.Brokers[j].Name })
	sort.Slice(s.Triggers, func(i, j int) bool { return s.Triggers[i].Name < s.Triggers[j].Name })
	s.DeadLetters, s.DeadLettersSeen = m.deadLetters()
	return s
}

// appendKeep appends v and keeps the last n values. It reuses the slice's array only
// while it has room, so snapshots already published never change.
func appendKeep[T any](s []T, v T, n int) []T {
	if len(s) >= n {
		out := make([]T, n, n+n/4)
		copy(out, s[len(s)-n+1:])
		out[n-1] = v
		return out
	}
	return append(s, v)
}

// copyBroker and copyTrigger snapshot the running values: the history slices are cut
// to their length, so later appends never show through.
func copyBroker(b *Broker) Broker {
	c := *b
	h := &c.History
	h.T, h.Ingress, h.Rejected = h.T[:len(h.T):len(h.T)], h.Ingress[:len(h.Ingress):len(h.Ingress)], h.Rejected[:len(h.Rejected):len(h.Rejected)]
	return c
}

func copyTrigger(t *Trigger) Trigger {
	c := *t
	h := &c.History
	h.T = h.T[:len(h.T):len(h.T)]
	h.Delivered, h.Failed = h.Delivered[:len(h.Delivered):len(h.Delivered)], h.Failed[:len(h.Failed):len(h.Failed)]
	h.Depth, h.Limit = h.Depth[:len(h.Depth):len(h.Depth)], h.Limit[:len(h.Limit):len(h.Limit)]
	h.P50, h.P99 = h.P50[:len(h.P50):len(h.P50)], h.P99[:len(h.P99):len(h.P99)]
	return c
}

// quantile estimates the q-quantile, in milliseconds, of the latencies observed between
// old and cur, interpolating linearly inside the bucket that holds it, as Prometheus's
// histogram_quantile does. nil when nothing was observed.
func quantile(q float64, cur, old *triggerCum) *float64 {
	if old == nil {
		old = &triggerCum{}
	}
	total := cur.count - old.count
	if total <= 0 || len(cur.bounds) == 0 {
		return nil
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, ub := range cur.bounds {
		c := cur.counts[i]
		if i < len(old.counts) {
			c -= old.counts[i]
		}
		if c >= rank {
			v := lower
			if c > below {
				v += (ub - lower) * (rank - below) / (c - below)
			}
			v *= 1000
			return &v
		}
		lower, below = ub, c
	}
	v := cur.bounds[len(cur.bounds)-1] * 1000 // beyond the last finite bucket
	return &v
}

// markReady sets every broker of s ready or not with the reason (WithNotReady), and adds
// a not-ready broker no metric names yet.
func (m *Monitor) markReady(s *Snapshot) {
	var nr map[string]string
	if m.o.notReady != nil {
		nr = m.o.notReady()
	}
	listed := make(map[string]bool, len(s.Brokers))
	for i := range s.Brokers {
		b := &s.Brokers[i]
		b.NotReadyReason, b.Ready = nr[b.Name], nr[b.Name] == ""
		listed[b.Name] = true
	}
	for name, reason := range nr {
		if listed[name] {
			continue
		}
		b := Broker{Name: name, NotReadyReason: reason}
		b.History.T, b.History.Ingress, b.History.Rejected = []int64{}, []float64{}, []float64{}
		s.Brokers = append(s.Brokers, b)
	}
}
