package broker

import (
	"context"
	"fmt"
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
	// AuthorizeSender decides whether the identity sender, already proven, may post to
	// key: a reply ingested in the process, with the identity of the trigger that got it.
	AuthorizeSender(sender, key string) Decision
}

// Identities give Sluice's own sends their sender's identity (package auth's Internal).
type Identities interface {
	// Sender returns the identity of the object kind namespace/name ("Trigger",
	// "Subscription") and the Authorization header value that proves it to this
	// process's ingress.
	Sender(kind, namespace, name string) (subject, authorization string)
}

// WithInternalIdentity gives every trigger's sends to origin (the server's own ingress,
// "scheme://host:port") the trigger's identity from ids (delivery.WithOwnIngress), and
// makes the replies ingested in the process pass the Authorizer with that identity, as
// Knative's broker posts a reply to its ingress with the Trigger's OIDC identity.
// Default: none (replies are ingested with the broker's authority).
func WithInternalIdentity(origin string, ids Identities) Option {
	return func(o *options) { o.ownOrigin, o.identities = origin, ids }
}

// replier returns the delivery.Replier of the trigger tc: with an authorizer and
// WithInternalIdentity, a reply must be let in by the authorizer with the trigger's
// identity, its filters included (403's reason as the error: retried, then
// dead-lettered); then it re-enters the broker (reply).
func (b *Broker) replier(tc config.Trigger) delivery.Replier {
	s := b.srv
	if s.opts.authorizer == nil || s.opts.identities == nil {
		return b.reply
	}
	sender, _ := s.opts.identities.Sender(tc.Kind, tc.Namespace, tc.Name)
	return func(ctx context.Context, e *event.Event) error {
		d := s.opts.authorizer.AuthorizeSender(sender, b.key)
		if d.Status == 0 && !d.admits(e) {
			d.Status, d.Reason = http.StatusForbidden, sender+" may not send event "+e.ID+" of type "+e.Type+" to /"+b.key+": the EventPolicy filters refuse it"
		}
		if d.Status != 0 {
			reason := "forbidden"
			if d.Status == http.StatusUnauthorized {
				reason = "unauthenticated"
			}
			s.metrics.rejected.WithLabelValues(b.key, reason).Inc()
			b.refused.Warn("reply_"+reason, "reply refused", "status", d.Status, "sender", sender, "reason", d.Reason)
			return fmt.Errorf("refused (%d): %s", d.Status, oneLine(d.Reason))
		}
		return b.reply(ctx, e)
	}
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
