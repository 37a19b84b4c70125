package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/event"
)

// The dead-letter store's endpoints, under TriggersPath (docs/dead-letters.md,
// "HTTP API"):
//
//	GET  /triggers/<ns>/<name>/dlq[?after=ID&limit=N]  a page of its dead letters (DLQPage)
//	POST /triggers/<ns>/<name>/dlq/redrive[?rate=N&id=ID...]  deliver them once more (DLQRedrive)
//	POST /triggers/<ns>/<name>/dlq/purge[?id=ID...]  delete them (DLQPurge)
//
// All three answer 403 without --ops-token-file: a listing shows the events' data.

// Bounds of a redrive.
const (
	// DefaultRedriveRate is the events per second a redrive hands to the trigger when
	// the request names no rate.
	DefaultRedriveRate = 50
	// MaxRedriveRate bounds the rate a redrive may ask for.
	MaxRedriveRate = 1000
	// maxRedriveIDs bounds the ids one redrive or purge may name.
	maxRedriveIDs = 1000
	// storeTimeout bounds what one request of the endpoints waits for the store.
	storeTimeout = 10 * time.Second
)

// WithDLQ sets the bounds of the dead-letter store, where a trigger's events go when
// they fail for good and it has no deadLetterSink: per trigger, the entries, bytes and
// age kept (oldest evicted first, counted in sluice_dlq_evicted_total). A durable channel
// that implements channel.DLQStorer keeps the store in its backend; otherwise it is in
// memory. MaxEntries 0 turns the store off: such events are logged, counted and dropped.
// Default dlq.DefaultLimits().
func WithDLQ(lim dlq.Limits) Option { return func(o *options) { o.dlq, o.dlqSet = lim, true } }

// WithDLQMemoryLimit bounds the bytes the dead-letter store in memory keeps, all
// triggers together (sluice serve --dlq-memory-limit): past it the oldest dead letter
// of any trigger is evicted first. At least 1. Default dlq.DefaultMemoryTotal.
func WithDLQMemoryLimit(n int64) Option { return func(o *options) { o.dlqMemory = n } }

// dlqLimits are the options' store limits; ok false when the store is off.
func (o *options) dlqLimits() (dlq.Limits, bool) {
	if !o.dlqSet {
		return dlq.DefaultLimits(), true
	}
	return o.dlq, o.dlq.MaxEntries != 0
}

// dlqMetrics are the store's series, labelled trigger="namespace/name".
type dlqMetrics struct {
	stored, evicted, redriven, withdrawn *prometheus.CounterVec
}

func newDLQMetrics(reg prometheus.Registerer) dlqMetrics {
	c := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Name: name, Help: help}, []string{"trigger"})
	}
	m := dlqMetrics{
		stored:   c("dlq_stored_total", "Events kept in the dead-letter store: they failed for good and the trigger has no deadLetterSink."),
		evicted:  c("dlq_evicted_total", "Dead letters evicted, oldest first, to keep a trigger's store within --dlq-max-entries, --dlq-max-bytes and --dlq-max-age, and the store in memory within --dlq-memory-limit."),
		redriven: c("dlq_redriven_total", "Dead letters handed to their trigger again by a redrive."),
		withdrawn: c("dlq_redrive_withdrawn_total", "Redriven dead letters purged after the redrive handed them to the trigger: "+
			"settled before their next attempt, or instead of being stored anew, with neither."),
	}
	reg.MustRegister(m.stored, m.evicted, m.redriven, m.withdrawn)
	return m
}

// dlqState is a broker's dead-letter store and its redrives.
type dlqState struct {
	store dlq.Store // nil: off

	mu       sync.Mutex
	running  map[string]*redrive // by trigger
	stopping bool
	wg       sync.WaitGroup
}

// redrive is one redrive in progress.
type redrive struct {
	total  int
	done   int // handed to the trigger (guarded by dlqState.mu)
	cancel context.CancelFunc
	ended  chan struct{} // closed when its goroutine returns
}

// openDLQ sets b's store: the channel's, if it keeps one, else memory.
func (b *Broker) openDLQ(ctx context.Context) {
	lim, on := b.srv.opts.dlqLimits()
	if !on {
		return
	}
	if st, ok := b.ch.(channel.DLQStorer); ok {
		s, err := st.DLQStore(ctx, lim)
		switch {
		case err == nil:
			b.dl.store = s
			return
		case errors.Is(err, channel.ErrNoDLQStore):
			b.log.Info("dead letters are kept in memory", "broker", b.key, "reason", err)
		default:
			b.log.Error("the channel's dead-letter store cannot be opened; keeping dead letters in memory", "broker", b.key, "err", err)
		}
	}
	b.dl.store = b.srv.dlqMemory
}

// keepDead is the delivery.DLQStorer of trigger.
func (b *Broker) keepDead(trigger string) func(context.Context, dlq.Entry) error {
	stored, evicted := b.srv.dlqm.stored.WithLabelValues(trigger), b.srv.dlqm.evicted.WithLabelValues(trigger)
	return func(ctx context.Context, e dlq.Entry) error {
		n, err := b.dl.store.Put(ctx, trigger, e)
		if err != nil {
			return err
		}
		stored.Inc()
		if n > 0 {
			evicted.Add(float64(n))
			b.log.Warn("dead letters evicted to make room: the store of the trigger is at its bound",
				"trigger", trigger, "evicted", n)
		}
		return nil
	}
}

// forgetDLQ drops the dead letters of a removed trigger from a store in memory, where
// nobody could list or redrive them any more; a durable store keeps them (another
// replica may still run the trigger, and re-adding it finds them again). A trigger of
// the same name that runs again by now (re-added, or moved to another broker) keeps
// them in memory too: they are its own, or the old one's, which it may list and redrive.
func (b *Broker) forgetDLQ(trigger string) {
	if b.dl.store == nil || b.dl.store.Durable() {
		return
	}
	if _, t := b.srv.findBrokerTrigger(trigger); t != nil {
		b.log.Info("trigger removed: its dead letters in memory stay, a trigger of the same name runs again", "trigger", trigger)
		return
	}
	if n, _ := b.dl.store.Purge(context.Background(), trigger); n > 0 {
		b.log.Warn("trigger removed: its dead letters in memory are dropped", "trigger", trigger, "dead_letters", n)
	}
}

// logLostDLQ logs, at shutdown, the dead letters the memory store still holds: they
// end with the process.
func (s *Server) logLostDLQ() {
	if m, ok := s.dlqMemory.(*dlq.Memory); ok {
		if n := m.Len(); n > 0 {
			s.log.Warn("dead letters kept in memory are lost at exit (a durable channel keeps them)", "dead_letters", n)
		}
	}
}

// stopRedrives cancels the broker's redrives and waits for them: what they had not
// handed over stays in the store.
func (b *Broker) stopRedrives() {
	b.dl.mu.Lock()
	b.dl.stopping = true
	for _, r := range b.dl.running {
		r.cancel()
	}
	b.dl.mu.Unlock()
	b.dl.wg.Wait()
}

// DLQPage is the answer of GET /triggers/<ns>/<name>/dlq.
type DLQPage struct {
	Trigger string `json:"trigger"`
	// Durable is true when the store outlives the process (a durable channel's).
	Durable bool `json:"durable"`
	// Total and Bytes are what the trigger's store holds now.
	Total int   `json:"total"`
	Bytes int64 `json:"bytes"`
	// Next is the after= of the next page; 0 on the last.
	Next uint64 `json:"next"`
	// Redrive is the redrive in progress, if any.
	Redrive *DLQRedrive `json:"redrive,omitempty"`
	// Entries are oldest first.
	Entries []DLQEntry `json:"entries"`
}

// DLQEntry is one dead letter: why it failed, and the event in CloudEvents structured
// JSON.
type DLQEntry struct {
	dlq.Entry
	Event json.RawMessage `json:"event"`
}

// DLQRedrive is the answer of POST .../dlq/redrive, and the state of a redrive.
type DLQRedrive struct {
	Trigger string `json:"trigger"`
	// Total is how many dead letters the redrive hands over (at most: with ids, those
	// still stored); Done how many it has.
	Total int `json:"total"`
	Done  int `json:"done"`
	// Rate is the events per second it hands over.
	Rate int `json:"rate"`
}

// DLQPurge is the answer of POST .../dlq/purge.
type DLQPurge struct {
	Trigger string `json:"trigger"`
	Purged  int    `json:"purged"`
}

// findBrokerTrigger returns the running trigger key and its broker, or nils.
func (s *Server) findBrokerTrigger(key string) (*Broker, *trigger) {
	for _, b := range s.snapshot() {
		b.mu.Lock()
		t := b.triggers[key]
		b.mu.Unlock()
		if t != nil {
			return b, t
		}
	}
	return nil, nil
}

// serveDLQ answers /triggers/<ns>/<name>/dlq[/redrive|/purge]; parts are the path's
// segments after TriggersPath, parts[2] == "dlq".
func (s *Server) serveDLQ(w http.ResponseWriter, r *http.Request, parts []string) {
	var action string
	switch {
	case len(parts) == 3 && r.Method == http.MethodGet:
	case len(parts) == 4 && (parts[3] == "redrive" || parts[3] == "purge") && r.Method == http.MethodPost:
		action = parts[3]
	case len(parts) == 4 && (parts[3] == "redrive" || parts[3] == "purge"):
		w.Header().Set("Allow", "POST")
		http.Error(w, r.Method+" is not allowed; POST to "+parts[3]+" a trigger's dead letters", http.StatusMethodNotAllowed)
		return
	case len(parts) == 3:
		w.Header().Set("Allow", "GET")
		http.Error(w, r.Method+" is not allowed; GET a trigger's dead letters", http.StatusMethodNotAllowed)
		return
	default:
		http.Error(w, "want "+TriggersPath+"<namespace>/<name>/dlq[/redrive|/purge]", http.StatusNotFound)
		return
	}
	if !s.opts.opsGuarded { // a listing shows the events' data: never on an open port
		what := action
		if what == "" {
			what = "list"
		}
		http.Error(w, what+" is off: this server has no operator token; start it with --ops-token-file to "+what+" dead letters", http.StatusForbidden)
		return
	}
	key := parts[0] + "/" + parts[1]
	b, t := s.findBrokerTrigger(key)
	if t == nil || parts[0] == "" || parts[1] == "" || t.key != subscriptionName(t.cfg) {
		http.Error(w, "trigger "+key+": "+errNoTrigger.Error(), http.StatusNotFound)
		return
	}
	if b.dl.store == nil {
		http.Error(w, "trigger "+key+": the dead-letter store is off (--dlq-max-entries 0)", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	q := r.URL.Query()
	ids, err := queryIDs(q["id"])
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var answer any
	switch action {
	case "":
		answer, err = s.listDLQ(ctx, b, key, q.Get("after"), q.Get("limit"))
	case "redrive":
		answer, err = s.startRedrive(b, t, q.Get("rate"), ids)
	case "purge":
		answer, err = s.purgeDLQ(ctx, b, key, ids)
	}
	var he *httpError
	switch {
	case errors.As(err, &he):
		http.Error(w, err.Error(), he.status)
		return
	case err != nil:
		s.log.Warn("dead-letter store", "trigger", key, "err", err)
		http.Error(w, "trigger "+key+": the dead-letter store cannot be read now: "+channelReason(err), http.StatusServiceUnavailable)
		return
	}
	if action != "" {
		s.log.Info("dead letters "+action+"d through the operator API", "trigger", key, "remote", r.RemoteAddr)
	}
	w.Header().Set("Content-Type", "application/json")
	if action == "redrive" {
		w.WriteHeader(http.StatusAccepted)
	}
	_ = json.NewEncoder(w).Encode(answer)
}

// httpError is an error answered with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// channelReason is what an answer tells of a store's error: the channel's kind of
// failure, not the backend's own words (hosts, accounts: docs/security.md).
func channelReason(err error) string {
	var ref *channel.Refusal
	if errors.As(err, &ref) {
		return ref.Reason
	}
	if errors.Is(err, channel.ErrUnavailable) {
		return channel.ErrUnavailable.Error()
	}
	return "store error"
}

// queryIDs parses the id= parameters.
func queryIDs(vals []string) (map[uint64]bool, error) {
	if len(vals) > maxRedriveIDs {
		return nil, badRequest("id: %d given; at most %d per request", len(vals), maxRedriveIDs)
	}
	if len(vals) == 0 {
		return nil, nil
	}
	ids := make(map[uint64]bool, len(vals))
	for _, v := range vals {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return nil, badRequest("id %q: want a dead letter's id (a positive integer)", v)
		}
		ids[n] = true
	}
	return ids, nil
}

// listDLQ answers a page of key's store.
func (s *Server) listDLQ(ctx context.Context, b *Broker, key, afterS, limitS string) (*DLQPage, error) {
	var after uint64
	var limit int
	var err error
	if afterS != "" {
		if after, err = strconv.ParseUint(afterS, 10, 64); err != nil {
			return nil, badRequest("after %q: want an id", afterS)
		}
	}
	if limitS != "" {
		if limit, err = strconv.Atoi(limitS); err != nil || limit < 1 || limit > dlq.MaxPage {
			return nil, badRequest("limit %q: want 1 to %d", limitS, dlq.MaxPage)
		}
	}
	p, err := b.dl.store.List(ctx, key, after, limit)
	if err != nil {
		return nil, err
	}
	out := &DLQPage{Trigger: key, Durable: b.dl.store.Durable(), Total: p.Total, Bytes: p.Bytes, Next: p.Next,
		Entries: make([]DLQEntry, len(p.Entries))}
	for i, e := range p.Entries {
		out.Entries[i] = DLQEntry{Entry: e, Event: event.AppendJSON(nil, e.Event)}
	}
	b.dl.mu.Lock()
	if r := b.dl.running[key]; r != nil {
		out.Redrive = &DLQRedrive{Trigger: key, Total: r.total, Done: r.done}
	}
	b.dl.mu.Unlock()
	return out, nil
}

// purgeDLQ deletes ids of key's store, or all of it. A purge of all of it stops the
// trigger's redrive first; one by id leaves it running (it skips what is gone).
func (s *Server) purgeDLQ(ctx context.Context, b *Broker, key string, ids map[uint64]bool) (*DLQPurge, error) {
	if ids == nil {
		if err := b.stopRedrive(ctx, key); err != nil {
			return nil, err
		}
		n, err := b.dl.store.Purge(ctx, key)
		return &DLQPurge{Trigger: key, Purged: n}, err
	}
	n := 0
	for id := range ids {
		err := b.dl.store.Delete(ctx, key, id)
		if errors.Is(err, dlq.ErrNotFound) {
			continue
		}
		if err != nil {
			s.log.Warn("dead-letter store: purge stopped", "trigger", key, "purged", n, "of", len(ids), "err", err)
			return nil, &httpError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf(
				"trigger %s: %d of the %d dead letters purged, then the dead-letter store failed: %s; purge the rest again",
				key, n, len(ids), channelReason(err))}
		}
		n++
	}
	return &DLQPurge{Trigger: key, Purged: n}, nil
}

// stopRedrive cancels the redrive of trigger key, if one runs, and waits for it to end:
// what it handed over before is being delivered.
func (b *Broker) stopRedrive(ctx context.Context, key string) error {
	b.dl.mu.Lock()
	r := b.dl.running[key]
	b.dl.mu.Unlock()
	if r == nil {
		return nil
	}
	r.cancel()
	select {
	case <-r.ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping the redrive: %w", ctx.Err())
	}
}

// startRedrive starts handing the dead letters of t (ids, or all stored now) to its
// dispatcher, at rateS per second.
func (s *Server) startRedrive(b *Broker, t *trigger, rateS string, ids map[uint64]bool) (*DLQRedrive, error) {
	perSec := DefaultRedriveRate
	if rateS != "" {
		n, err := strconv.Atoi(rateS)
		if err != nil || n < 1 || n > MaxRedriveRate {
			return nil, badRequest("rate %q: want 1 to %d events per second", rateS, MaxRedriveRate)
		}
		perSec = n
	}
	// The redrive covers what is stored now: entries up to the last one, so that what
	// fails again and is stored anew is not redriven twice by it.
	ctx, cancel := context.WithTimeout(s.life, storeTimeout)
	defer cancel()
	p, err := b.dl.store.List(ctx, t.key, 0, 1)
	if err != nil {
		return nil, err
	}
	last, total := p.Last, p.Total
	if ids != nil {
		total = len(ids)
	}
	b.dl.mu.Lock()
	defer b.dl.mu.Unlock()
	if r := b.dl.running[t.key]; r != nil {
		return nil, &httpError{status: http.StatusConflict,
			msg: fmt.Sprintf("trigger %s: a redrive is running (%d of %d handed over); wait for it, or purge", t.key, r.done, r.total)}
	}
	if b.dl.stopping {
		return nil, &httpError{status: http.StatusServiceUnavailable, msg: "shutting down"}
	}
	rctx, rcancel := context.WithCancel(s.life)
	r := &redrive{total: total, cancel: rcancel, ended: make(chan struct{})}
	if b.dl.running == nil {
		b.dl.running = make(map[string]*redrive)
	}
	b.dl.running[t.key] = r
	b.dl.wg.Go(func() {
		defer close(r.ended)
		defer rcancel()
		b.redrive(rctx, t, r, last, ids, perSec)
	})
	return &DLQRedrive{Trigger: t.key, Total: total, Rate: perSec}, nil
}

// redrive hands t's dead letters up to last (those in ids, if any) to its dispatcher,
// perSec a second. Each stays in the store until the dispatcher settles it: delivered,
// or stored again as a new dead letter.
func (b *Broker) redrive(ctx context.Context, t *trigger, r *redrive, last uint64, ids map[uint64]bool, perSec int) {
	defer func() {
		b.dl.mu.Lock()
		delete(b.dl.running, t.key)
		b.dl.mu.Unlock()
	}()
	lim := rate.NewLimiter(rate.Limit(perSec), 1)
	redriven := b.srv.dlqm.redriven.WithLabelValues(t.key)
	withdrawn := b.srv.dlqm.withdrawn.WithLabelValues(t.key)
	handed := 0
	for after := uint64(0); after < last; {
		p, err := b.dl.store.List(ctx, t.key, after, 100)
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("redrive stopped: the dead-letter store cannot be read", "trigger", t.key, "err", err)
			}
			return
		}
		for _, e := range p.Entries {
			if e.ID > last {
				break
			}
			if ids != nil && !ids[e.ID] {
				continue
			}
			if lim.Wait(ctx) != nil {
				return
			}
			held, err := b.holds(ctx, t.key, e.ID)
			if err != nil {
				if ctx.Err() == nil {
					b.log.Warn("redrive stopped: the dead-letter store cannot be read", "trigger", t.key, "err", err)
				}
				return
			}
			if !held {
				continue // purged or evicted since it was listed
			}
			m := &storedMsg{store: b.dl.store, trigger: t.key, id: e.ID, ev: e.Event, withdrawn: withdrawn}
			if err := t.dispatcher.Redeliver(ctx, m); err != nil {
				if ctx.Err() == nil {
					b.log.Warn("redrive stopped: the trigger no longer takes events", "trigger", t.key, "err", err)
				}
				return
			}
			redriven.Inc()
			handed++
			b.dl.mu.Lock()
			r.done = handed
			b.dl.mu.Unlock()
		}
		if p.Next == 0 {
			break
		}
		after = p.Next
	}
	b.log.Info("redrive handed every dead letter to the trigger", "trigger", t.key, "events", handed)
}

// holds reports whether trigger's store still holds entry id.
func (b *Broker) holds(ctx context.Context, trigger string, id uint64) (bool, error) {
	return dlq.Holds(ctx, b.dl.store, trigger, id)
}

// storedMsg is a dead letter handed to its trigger by a redrive: settling it deletes
// it from the store; releasing it leaves it there. Once purged it is withdrawn: the
// dispatcher settles it before its next attempt, and does not store it anew.
type storedMsg struct {
	store     dlq.Store
	trigger   string
	id        uint64
	ev        *event.Event
	withdrawn prometheus.Counter
}

// Withdrawn reports whether the dead letter is no longer stored (purged, or evicted).
func (m *storedMsg) Withdrawn(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	held, err := dlq.Holds(ctx, m.store, m.trigger, m.id)
	if err != nil {
		return false, fmt.Errorf("dead letter %d of %s: %w", m.id, m.trigger, err)
	}
	gone := !held
	if gone {
		m.withdrawn.Inc()
	}
	return gone, nil
}

func (m *storedMsg) Event() *event.Event { return m.ev }

// Ack deletes the dead letter: it was delivered, or stored again.
func (m *storedMsg) Ack() error {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	err := m.store.Delete(ctx, m.trigger, m.id)
	if errors.Is(err, dlq.ErrNotFound) { // purged or evicted meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("dead letter %d of %s: %w", m.id, m.trigger, err)
	}
	return nil
}

// Release leaves the dead letter in the store, for another redrive.
func (m *storedMsg) Release() bool { return true }
