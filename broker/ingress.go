package broker

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/overload"
)

// Handler returns the HTTP handler of the ingress and the health probes:
//
//	POST /<namespace>/<broker>  ingest (202, 400, 404, 405, 413, 415, 429, 503)
//	GET  /healthz               200 while the process runs
//	GET  /readyz                200 once configured, every channel can store and every trigger's consumer joined; 503 while shutting down
//	GET  /status                every object of the configuration, ready or not (JSON)
//	POST /triggers/<ns>/<name>/pause|resume, GET /triggers/<ns>/<name>  (TriggersPath)
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
		return
	case "/status":
		s.serveStatus(w, r)
		return
	case "/readyz":
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		if key, reason := s.firstNotStoring(); key != "" {
			http.Error(w, "not ready: broker "+key+" "+reason, http.StatusServiceUnavailable)
			return
		}
		if t := s.notJoined(); t != "" {
			http.Error(w, "not ready: trigger "+t+" has not joined its consumer group yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
		return
	}
	if IsTriggerPath(r.URL.Path) {
		s.serveTrigger(w, r) // pause.go
		return
	}
	key := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/")
	b := s.lookup(key)
	if b == nil {
		s.metrics.rejected.WithLabelValues("", "unknown_broker").Inc()
		http.Error(w, "no broker or channel at /"+key, http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodPost:
	case http.MethodOptions:
		w.Header().Set("Allow", "POST, OPTIONS")
		w.WriteHeader(http.StatusOK)
		return
	default:
		s.metrics.rejected.WithLabelValues(b.key, "method").Inc()
		w.Header().Set("Allow", "POST, OPTIONS")
		http.Error(w, r.Method+" is not allowed; POST events here", http.StatusMethodNotAllowed)
		return
	}
	if s.draining.Load() {
		s.rejectShuttingDown(w, b)
		return
	}
	var authz Decision // who sent it (authorize.go); nothing to check without an authorizer
	if s.opts.authorizer != nil && !s.authorize(w, r, b, &authz) {
		return
	}
	// What the request counts against the broker's room while it is stored (package
	// overload), given back once it is (or fails to be); nothing for a request not let in.
	var adm overload.Admission
	defer adm.Done()
	n := max(r.ContentLength, 0)
	// A body that could never be taken is refused before any wait for room: a 429 would
	// have its client retry forever.
	if s.tooLarge(w, r, b) {
		return
	}
	// The request's one read of the wall clock: admission's backlog check, the ingress
	// latency and the knativearrivaltime stamp share it (time.Now costs two clock reads).
	start := time.Now()
	// Full: wait for room before reading the body; if none comes, refuse, the cheapest
	// answer an overload can get, and hold the connection.
	adm, waited, ok := b.gate.Admit(r, n, start)
	if !ok {
		// A request that waited has held its connection for AdmitWait already.
		s.rejectFull(w, r, b, "the broker holds as much as it may", s.opts.overload.AdmitWait)
		return
	}
	if waited {
		start = time.Now() // the wait for room is not the request's latency
	}
	evs, err := event.ReadRequest(r, s.opts.maxEventBytes)
	if err != nil {
		status, reason := http.StatusBadRequest, "invalid"
		var he *event.HTTPError
		if errors.As(err, &he) {
			status = he.Status
		}
		var sc statusCoder
		if errors.As(err, &sc) && sc.StatusCode() == http.StatusServiceUnavailable {
			// The server had no room for more of a body of unknown length.
			status, reason = http.StatusServiceUnavailable, "unavailable"
			w.Header().Set("Retry-After", "1")
		}
		switch status {
		case http.StatusRequestEntityTooLarge:
			reason = "too_large"
		case http.StatusUnsupportedMediaType:
			reason = "unsupported_media_type"
		}
		s.metrics.rejected.WithLabelValues(b.key, reason).Inc()
		http.Error(w, oneLine(err.Error()), status)
		return
	}
	if authz.Filters != nil && !s.authorizeEvents(w, b, &authz, evs) {
		return
	}
	if !s.admitRate(w, b, len(evs)) {
		return
	}
	b.m.received.Add(float64(len(evs)))
	if b.isKnBr {
		arrived := s.arrival.at(start)
		for _, e := range evs {
			e.Extensions = slices.Grow(e.Extensions, 2) // room for both stamps: one allocation at most
			e.Set(ExtArrivalTime, arrived)
			if err := stampTTL(e); err != nil {
				s.metrics.rejected.WithLabelValues(b.key, "ttl").Inc()
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
	}
	// sluice.dev/dedup-window: events accepted within the window are answered 202 with
	// the others and not stored again (dedup.go).
	var keys []dedupKey
	dw := b.dedup.Load()
	if dw != nil {
		n := len(evs)
		evs, keys = dw.filter(evs, nil, start)
		if d := n - len(evs); d > 0 {
			b.m.deduplicated.Add(float64(d))
		}
	}
	var spans *ingressSpans
	if s.opts.tracer != nil {
		spans = s.startIngress(r, b, evs, start)
	}
	// Hold the ingest lock while storing, so Shutdown starts draining only after every
	// request that passed this check has stored its events or failed.
	s.ingestMu.RLock()
	if s.draining.Load() {
		s.ingestMu.RUnlock()
		if spans != nil {
			spans.end(errShuttingDown, http.StatusServiceUnavailable)
		}
		s.rejectShuttingDown(w, b)
		return
	}
	var unmatched int
	if len(evs) > 0 {
		unmatched, err = b.ingest(r.Context(), evs)
	}
	s.ingestMu.RUnlock()
	if spans != nil {
		spans.end(err, storeStatus(err))
	}
	if err != nil {
		s.storeFailed(w, r, b, err)
		return
	}
	if dw != nil {
		dw.accepted(keys)
	}
	b.m.accepted.Add(float64(len(evs)))
	if unmatched > 0 {
		b.m.unmatched.Add(float64(unmatched))
	}
	b.m.latency.Observe(time.Since(start).Seconds())
	if b.gate.Reserves(r) {
		// The 202 is flushed before the wait for room for the connection's next request:
		// complete, so that the client sends it, and it waits in the socket meanwhile.
		// This request's room is given back first: it is stored.
		adm.Done()
		w.Header()["Content-Length"] = zeroLength
		w.WriteHeader(http.StatusAccepted)
		b.gate.Reserve(w, r)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

var zeroLength = []string{"0"}

// maxByteser is implemented by channels that can never hold more than MaxBytes bytes at
// once (a memory channel: its share of --memory-limit).
type maxByteser interface{ MaxBytes() int64 }

// tooLarge answers 413, before the body is read, a request whose Content-Length is over
// --max-event-bytes (in the words a body found too large while read is answered) or
// over what b's channel can ever hold, and reports whether it did.
func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request, b *Broker) bool {
	n := r.ContentLength
	var msg string
	if n > s.opts.maxEventBytes {
		msg = fmt.Sprintf("%v: %d bytes, limit %d", event.ErrTooLarge, n, s.opts.maxEventBytes)
	} else if m, ok := b.ch.(maxByteser); ok && n > m.MaxBytes() {
		msg = fmt.Sprintf("%v: %d bytes, more than the channel holds at once (%d bytes, --memory-limit)", event.ErrTooLarge, n, m.MaxBytes())
	} else {
		return false
	}
	s.metrics.rejected.WithLabelValues(b.key, "too_large").Inc()
	// The body is not read: net/http would read up to 256 KiB of it before answering
	// on a connection kept open (HTTP/1.x; on HTTP/2 it would end the whole connection).
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	http.Error(w, msg, http.StatusRequestEntityTooLarge)
	return true
}

// storeFailed answers a request whose events the channel did not store: 429 when it is
// full, 413 when an event is larger than it stores, 503 otherwise; all but the 413 with
// Retry-After. The sender is told the channel's reason (channel.Reason), never the
// backend's own error, which may name its hosts, topics or cloud account
// (docs/security.md); that goes to the log, at most one line per broker and answer every
// ratelog.Every while failures repeat.
func (s *Server) storeFailed(w http.ResponseWriter, r *http.Request, b *Broker, err error) {
	reason := oneLine(channel.Reason(err))
	if errors.Is(err, channel.ErrFull) {
		b.refused.Warn("full", "refusing requests: the channel is full", "err", err)
		s.rejectFull(w, r, b, reason, 0)
		return
	}
	if errors.Is(err, channel.ErrTooLarge) {
		b.refused.Warn("too_large", "refusing events larger than the channel stores", "err", err)
		s.metrics.rejected.WithLabelValues(b.key, "too_large").Inc()
		http.Error(w, "event too large: "+reason, http.StatusRequestEntityTooLarge)
		return
	}
	b.refused.Warn("unavailable", "refusing requests: cannot store events", "err", err)
	s.metrics.rejected.WithLabelValues(b.key, "unavailable").Inc()
	w.Header().Set("Retry-After", "1")
	http.Error(w, "cannot store events: "+reason, http.StatusServiceUnavailable)
}

// oneLine keeps an error reason to one line for the response body.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

func (s *Server) rejectShuttingDown(w http.ResponseWriter, b *Broker) {
	s.metrics.rejected.WithLabelValues(b.key, "shutting_down").Inc()
	w.Header().Set("Retry-After", "5")
	http.Error(w, "shutting down", http.StatusServiceUnavailable)
}

// statusCoder is an error that names the status its request is answered with. The HTTP
// server's in-flight body budget refusal is one (503, answered with Retry-After): a body
// of unknown length that found no room for its next bytes within the read timeout.
type statusCoder interface{ StatusCode() int }
