package broker

import (
	"net/http"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/filter"
)

// Authorizer decides who may post to a broker or channel (package auth holds Sluice's:
// bearer tokens, client certificates and Knative's EventPolicies). A server without one
// (the default) lets everyone in and pays nothing for the check.
type Authorizer interface {
	// Apply makes cfg the configuration requests are checked against; the server calls
	// it at the start of every Apply.
	Apply(cfg *config.Config)
	// Authorize decides whether r may post to the broker or channel key ("ns/name"),
	// before its body is read.
	Authorize(r *http.Request, key string) Decision
}

// Decision is an Authorizer's answer.
type Decision struct {
	// Status is 0 when the sender may post, else the HTTP status to answer: 401 (no
	// valid identity) or 403 (not allowed).
	Status int
	// Reason is the one-line reason of a refusal, sent to the client and logged. It
	// must never hold a credential.
	Reason string
	// Sender is the identity proven, empty when none was.
	Sender string
	// Filters, when not empty, must let each event through, at least one of them (an
	// EventPolicy's spec.filters); an event none matches is refused with 403.
	Filters []filter.Filter
}

// WithAuthorizer checks every request to a broker or channel with a (401/403 before the
// body is read; 403 for an event the policies' filters refuse). Default: none.
func WithAuthorizer(a Authorizer) Option { return func(o *options) { o.authorizer = a } }

// WithTokenSource gives deliveries to destinations with an audience their tokens
// (delivery.WithTokenSource). Default: none.
func WithTokenSource(ts delivery.TokenSource) Option { return func(o *options) { o.tokens = ts } }

// admits reports whether the decision's filters let e through.
func (d *Decision) admits(e *event.Event) bool {
	if len(d.Filters) == 0 {
		return true
	}
	for _, f := range d.Filters {
		if f.Match(e) {
			return true
		}
	}
	return false
}

// authorize runs the authorizer on r for b. It answers the refusal and returns false
// when r may not post; d holds the decision for the events' filters.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, b *Broker, d *Decision) bool {
	*d = s.opts.authorizer.Authorize(r, b.key)
	if d.Status == 0 {
		return true
	}
	reason := "forbidden"
	if d.Status == http.StatusUnauthorized {
		reason = "unauthenticated"
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	}
	s.metrics.rejected.WithLabelValues(b.key, reason).Inc()
	// One line per broker and status every ratelog.Every, and a count of the others: a
	// flood of refused requests must not flood the log.
	b.refused.Warn(reason, "request refused", "status", d.Status, "sender", d.Sender, "reason", d.Reason)
	http.Error(w, oneLine(d.Reason), d.Status)
	return false
}

// authorizeEvents refuses the request (403) when an event fails the decision's filters.
func (s *Server) authorizeEvents(w http.ResponseWriter, b *Broker, d *Decision, evs []*event.Event) bool {
	for _, e := range evs {
		if !d.admits(e) {
			s.metrics.rejected.WithLabelValues(b.key, "forbidden").Inc()
			reason := oneLine(d.Sender + " may not send event " + e.ID + " of type " + e.Type + " to /" + b.key + ": the EventPolicy filters refuse it")
			b.refused.Warn("forbidden_event", "event refused", "status", http.StatusForbidden, "sender", d.Sender, "reason", reason)
			http.Error(w, reason, http.StatusForbidden)
			return false
		}
	}
	return true
}
