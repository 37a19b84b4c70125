// Package receive is the CloudEvents receiver behind `sluice receive` and `sluice bench`.
//
// It accepts binary, structured and batch CloudEvents over HTTP, answers a configurable
// status, and accounts for every event: a per-second throughput series, end-to-end
// latency from the sluicesent extension (receive time − intended send time, HDR
// histogram), duplicates (a sequence number seen twice within a run) and lost events
// (sequence gaps per run, counted at the end because a broker may reorder). It can
// inject faults (a share of failed answers, delays) to test how brokers retry.
package receive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-broker/sluice/internal/httpserver"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Options configure a Receiver. The zero value answers 202 with no faults.
type Options struct {
	Status     int           // answer to accepted events (default 202)
	FailRatio  float64       // share of requests answered FailStatus instead (0…1)
	FailStatus int           // default 503
	DelayMin   time.Duration // each answer waits a uniform random time in [DelayMin, DelayMax]
	DelayMax   time.Duration
	Epoch      time.Time // origin of the per-second series (default: New's time)
}

// Receiver is an http.Handler that counts CloudEvents; /metrics serves Prometheus
// metrics from a private registry. All methods are safe for concurrent use.
type Receiver struct {
	o       Options
	metrics http.Handler
	bufs    sync.Pool
	refuse  atomic.Bool // answer 503 to every event (bench --backlog)

	mEvents, mDups, mInvalid, mRejected prometheus.Counter
	mLatency                            prometheus.Histogram

	mu          sync.Mutex
	runs        map[string]*runState
	seqBits     uint64 // the sum of the runs' bitsets' Max, bounded by maxSeqBits
	events      uint64 // accepted events, warm-up included
	warmup      uint64
	dups        uint64
	invalid     uint64 // requests that were not CloudEvents
	rejected    uint64 // requests failed on purpose (fault injection)
	refused     uint64 // requests answered 503 while refusing (SetRefusing)
	total       *hdrhistogram.Histogram
	second      *hdrhistogram.Histogram
	secEvents   uint64
	secDups     uint64
	series      []stats.RecvSecond
	first, last time.Time
	epoch       time.Time
}

type runState struct {
	seen stats.Bitset
	dups uint64
}

// New returns a Receiver.
func New(o Options) *Receiver {
	if o.Status == 0 {
		o.Status = http.StatusAccepted
	}
	if o.FailStatus == 0 {
		o.FailStatus = http.StatusServiceUnavailable
	}
	if o.DelayMax < o.DelayMin {
		o.DelayMax = o.DelayMin
	}
	r := &Receiver{
		o:      o,
		runs:   map[string]*runState{},
		total:  stats.NewHist(),
		second: stats.NewHist(),
		bufs:   sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}
	reg := prometheus.NewRegistry()
	r.mEvents = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_receive_events_total", Help: "CloudEvents received and accepted."})
	r.mDups = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_receive_duplicates_total", Help: "Events whose run and sequence number were already seen."})
	r.mInvalid = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_receive_invalid_total", Help: "Requests that were not valid CloudEvents."})
	r.mRejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_receive_rejected_total", Help: "Requests failed on purpose by --fail-ratio."})
	r.mLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_receive_e2e_latency_seconds",
		Help:    "End-to-end latency from the sluicesent extension to receipt.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	})
	lost := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_receive_lost_events", Help: "Sequence gaps so far, summed over runs (may shrink as late events arrive)."},
		func() float64 { return float64(r.Report().Lost) })
	reg.MustRegister(r.mEvents, r.mDups, r.mInvalid, r.mRejected, r.mLatency, lost)
	r.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return r
}

// event is what the receiver needs of one CloudEvent.
type event struct {
	ID     string     `json:"id"`
	Spec   string     `json:"specversion"`
	Run    flexString `json:"sluicerun"`
	Seq    flexString `json:"sluiceseq"`
	Sent   flexString `json:"sluicesent"`
	Warmup flexString `json:"sluicewarmup"`
}

// flexString accepts a JSON string or number.
type flexString string

// UnmarshalJSON implements json.Unmarshaler.
func (f *flexString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
		return nil
	}
	*f = flexString(b)
	return nil
}

func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ServeHTTP implements http.Handler.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/metrics" && req.Method == http.MethodGet {
		r.metrics.ServeHTTP(w, req)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST CloudEvents here", http.StatusMethodNotAllowed)
		return
	}
	now := time.Now()
	buf := r.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer r.bufs.Put(buf)
	if _, err := buf.ReadFrom(req.Body); err != nil {
		r.countInvalid()
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if r.refuse.Load() {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if r.o.FailRatio > 0 && rand.Float64() < r.o.FailRatio {
		r.mu.Lock()
		r.rejected++
		r.mu.Unlock()
		r.mRejected.Inc()
		r.delay()
		w.WriteHeader(r.o.FailStatus)
		return
	}
	var err error
	ct := first(req.Header, "Content-Type")
	switch {
	case strings.HasPrefix(ct, cevent.ContentTypeBatch):
		var evs []event
		if err = json.Unmarshal(buf.Bytes(), &evs); err == nil {
			for i := range evs {
				if err = r.record(&evs[i], now); err != nil {
					break
				}
			}
		}
	case strings.HasPrefix(ct, cevent.ContentTypeStructured):
		var ev event
		if err = json.Unmarshal(buf.Bytes(), &ev); err == nil {
			err = r.record(&ev, now)
		}
	default:
		h := req.Header
		ev := event{
			ID: first(h, "Ce-Id"), Spec: first(h, "Ce-Specversion"),
			Run: flexString(first(h, "Ce-Sluicerun")), Seq: flexString(first(h, "Ce-Sluiceseq")),
			Sent: flexString(first(h, "Ce-Sluicesent")), Warmup: flexString(first(h, "Ce-Sluicewarmup")),
		}
		if ev.Spec == "" && ct != "" {
			if mt, _, perr := mime.ParseMediaType(ct); perr == nil && strings.HasPrefix(mt, "application/cloudevents") {
				err = fmt.Errorf("unsupported content type %q", mt)
				break
			}
		}
		err = r.record(&ev, now)
	}
	if err != nil {
		r.countInvalid()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.delay()
	w.WriteHeader(r.o.Status)
}

func (r *Receiver) countInvalid() {
	r.mu.Lock()
	r.invalid++
	r.mu.Unlock()
	r.mInvalid.Inc()
}

func (r *Receiver) delay() {
	d := r.o.DelayMin
	if span := r.o.DelayMax - r.o.DelayMin; span > 0 {
		d += rand.N(span)
	}
	if d > 0 {
		time.Sleep(d)
	}
}

var errNotCE = errors.New("not a CloudEvent: specversion and id are required")

// Bounds on what senders can make a receiver remember: the sequence numbers of all runs
// together span at most maxSeqBits (their bitsets take at most twice that many bits), and
// at most maxRuns runs are told apart. An event past either is answered 400.
const (
	maxSeqBits = stats.MaxEncodedBits
	maxRuns    = 10000
)

// record accounts for one event received at now.
func (r *Receiver) record(ev *event, now time.Time) error {
	if ev.Spec == "" || ev.ID == "" {
		return errNotCE
	}
	var lat time.Duration
	hasLat := false
	if ev.Sent != "" {
		if ns, err := strconv.ParseInt(string(ev.Sent), 10, 64); err == nil {
			lat, hasLat = now.Sub(time.Unix(0, ns)), true
		}
	}
	seq, hasSeq := uint64(0), false
	if ev.Seq != "" {
		if s, err := strconv.ParseUint(string(ev.Seq), 10, 64); err == nil {
			seq, hasSeq = s, true
		}
	}
	warm := ev.Warmup != "" && ev.Warmup != "0" && ev.Warmup != "false"
	dup := false
	r.mu.Lock()
	if hasSeq {
		rs := r.runs[string(ev.Run)]
		if rs == nil {
			if len(r.runs) >= maxRuns {
				r.mu.Unlock()
				return fmt.Errorf("sluicerun %q: the receiver already tells %d runs apart, its bound", ev.Run, maxRuns)
			}
			rs = &runState{}
			r.runs[string(ev.Run)] = rs
		}
		if seq >= rs.seen.Max() {
			grown := r.seqBits - rs.seen.Max() + seq + 1
			if seq >= maxSeqBits || grown > maxSeqBits {
				r.mu.Unlock()
				return fmt.Errorf("sluiceseq %d: the sequence numbers of all runs may span %d, the receiver's bound", seq, uint64(maxSeqBits))
			}
			r.seqBits = grown
		}
		if dup = rs.seen.Add(seq); dup {
			rs.dups++
		}
	}
	if dup {
		r.dups++
		r.secDups++
	} else {
		r.events++
		r.secEvents++
		if warm {
			r.warmup++
		} else if hasLat {
			stats.Record(r.total, lat)
			stats.Record(r.second, lat)
		}
		if r.first.IsZero() {
			r.first = now
		}
		r.last = now
	}
	r.mu.Unlock()
	if dup {
		r.mDups.Inc()
	} else {
		r.mEvents.Inc()
		if hasLat && !warm {
			r.mLatency.Observe(lat.Seconds())
		}
	}
	return nil
}

// tick closes the per-second row for second t; a trailing partial second with no
// events is dropped.
func (r *Receiver) tick(t int, last bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last && r.secEvents == 0 && r.secDups == 0 {
		return
	}
	s := stats.Summarize(r.second)
	r.series = append(r.series, stats.RecvSecond{
		T: t, Events: r.secEvents, Duplicates: r.secDups,
		P50: ms(s.P50), P90: ms(s.P90), P99: ms(s.P99), P999: ms(s.P999), Max: ms(s.Max),
	})
	r.second.Reset()
	r.secEvents, r.secDups = 0, 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SetRefusing makes the receiver answer 503 Service Unavailable to every event request
// (true), recording nothing of them but their count (Report.Refused), or accept them
// again (false). bench --backlog refuses while it builds a backlog in the target.
func (r *Receiver) SetRefusing(on bool) { r.refuse.Store(on) }

// Count returns the number of distinct events received so far (warm-up included).
func (r *Receiver) Count() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events
}

// Seen returns a copy of the sequence numbers received for run.
func (r *Receiver) Seen(run string) *stats.Bitset {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &stats.Bitset{}
	if rs := r.runs[run]; rs != nil {
		rs.seen.CopyTo(out)
	}
	return out
}

// Series keeps the per-second series: it closes one row per second counted from epoch
// until ctx is done, then closes the partial last second. It blocks; run it once.
func (r *Receiver) Series(ctx context.Context, epoch time.Time) {
	r.mu.Lock()
	r.epoch = epoch
	r.mu.Unlock()
	for t := 0; ; t++ {
		at := epoch.Add(time.Duration(t+1) * time.Second)
		select {
		case <-ctx.Done():
			if time.Since(epoch) > time.Duration(t)*time.Second {
				r.tick(t, true)
			}
			return
		case <-time.After(time.Until(at)):
			r.tick(t, false)
		}
	}
}

// Listen opens a TCP listener on addr.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("receive: listen %s: %w", addr, err)
	}
	return ln, nil
}

// maxAnswerTime bounds the time from a request's head to the end of its answer: long
// enough for any injected delay a test would ask for (net/http, which served the
// receiver before, had no such bound).
const maxAnswerTime = 10 * time.Minute

// NewServer returns a server of r on ln: Sluice's own (internal/httpserver), whose lean
// HTTP/1.1 path serves the plain POSTs deliveries are, for less CPU per delivery than
// net/http (docs/decisions/0002-lean-http1-ingress.md). On a machine where the receiver
// shares a core with the generator, what the receiver costs is taken from what the load
// kit can offer and count. Serve it with Serve; stop it with Shutdown. The server owns
// ln: it is closed on error too.
func NewServer(ln net.Listener, r *Receiver) (*httpserver.Server, error) {
	srv, err := httpserver.New(ln, r, httpserver.WithReadHeaderTimeout(10*time.Second),
		httpserver.WithIdleTimeout(120*time.Second), httpserver.WithWriteTimeout(maxAnswerTime),
		httpserver.WithRequestReuse(true)) // ServeHTTP keeps nothing of a request past its return
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("receive: %w", err)
	}
	return srv, nil
}

// WaitQuiet returns when n consecutive periods pass without a new event, counting only
// after the first event arrived (thrpt-receiver's stop rule), or when ctx is done.
// n = 0 waits for ctx only.
func (r *Receiver) WaitQuiet(ctx context.Context, n int, period time.Duration) {
	if n <= 0 || period <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	last, quiet := r.Count(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c := r.Count()
			if c == last && c > 0 {
				quiet++
				if quiet >= n {
					return
				}
			} else {
				quiet = 0
			}
			last = c
		}
	}
}
