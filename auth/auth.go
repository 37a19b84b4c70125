// Package auth decides who may send events to which broker or channel: the sender's
// identity from a bearer token (a JWT verified with go-oidc) or a verified TLS client
// certificate, and Knative's EventPolicies over it (docs/security.md). It also reads the
// tokens Sluice sends to subscribers that ask for an audience (TokenFiles).
//
// An Authorizer implements broker.Authorizer. The broker calls it only when it is
// configured: a server without one pays nothing.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/filter"
)

// Mode is what applies to a broker or channel no EventPolicy names: Knative's
// default-authorization-mode.
type Mode string

// The default modes.
const (
	// AllowAll lets every authenticated sender in.
	AllowAll Mode = "allow-all"
	// AllowSameNamespace lets in the service accounts of the target's namespace
	// (subject system:serviceaccount:<namespace>:…). Knative's default.
	AllowSameNamespace Mode = "allow-same-namespace"
	// DenyAll lets no one in: every target needs an EventPolicy.
	DenyAll Mode = "deny-all"
)

// ParseMode parses a Mode, naming the flag in its error.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case AllowAll, AllowSameNamespace, DenyAll:
		return m, nil
	}
	return "", fmt.Errorf("--auth-default %q: want allow-all, allow-same-namespace or deny-all", s)
}

// Option configures an Authorizer; see New.
type Option func(*options)

type options struct {
	verifier *Verifier
	certs    bool
	mode     Mode
	internal *Internal
}

// WithVerifier accepts bearer tokens that v verifies.
func WithVerifier(v *Verifier) Option { return func(o *options) { o.verifier = v } }

// WithClientCertificates accepts a verified TLS client certificate as the sender's
// identity when the request carries no bearer token: the subject's common name.
func WithClientCertificates() Option { return func(o *options) { o.certs = true } }

// WithInternal accepts the tokens of in: Sluice's own sends to its own ingress, with
// the identity of the object that sends (Internal).
func WithInternal(in *Internal) Option { return func(o *options) { o.internal = in } }

// WithDefaultMode sets the mode for targets no EventPolicy names. Default
// AllowSameNamespace, as in Knative.
func WithDefaultMode(m Mode) Option { return func(o *options) { o.mode = m } }

// Authorizer checks each request to a broker or channel: 401 without a valid identity,
// 403 when the identity (or the event, through spec.filters) is not allowed. Safe for
// concurrent use; Apply swaps the policies while requests are checked.
type Authorizer struct {
	opts    options
	targets atomic.Pointer[map[string]*target] // by broker key, from the last Apply
}

// target is what applies to one broker or channel.
type target struct {
	audience string
	ns       string
	policies []*config.EventPolicy // empty, with invalid empty too: the default mode
	invalid  []*config.EventPolicy // invalid policies that apply: they let no one in
}

// New returns an Authorizer. It needs WithVerifier or WithClientCertificates: without
// either no sender could prove who it is.
func New(opts ...Option) (*Authorizer, error) {
	o := options{mode: AllowSameNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	if o.verifier == nil && !o.certs {
		return nil, errors.New("auth: WithVerifier or WithClientCertificates is required (--oidc-issuer or --tls-client-ca)")
	}
	if _, err := ParseMode(string(o.mode)); err != nil {
		return nil, fmt.Errorf("auth: WithDefaultMode: %w", err)
	}
	a := &Authorizer{opts: o}
	empty := map[string]*target{}
	a.targets.Store(&empty)
	return a, nil
}

// Audience is the audience a token must name to send to b, as Knative sets it:
// "eventing.knative.dev/broker/<ns>/<name>" for a Broker, "messaging.knative.dev/
// <kind>/<ns>/<name>" (kind lower-cased) for a channel.
func Audience(b config.Broker) string {
	switch b.Kind {
	case "", "Broker":
		return "eventing.knative.dev/broker/" + b.Namespace + "/" + b.Name
	}
	return "messaging.knative.dev/" + strings.ToLower(b.Kind) + "/" + b.Namespace + "/" + b.Name
}

// Apply makes cfg's brokers and EventPolicies the ones requests are checked against.
func (a *Authorizer) Apply(cfg *config.Config) {
	m := make(map[string]*target, len(cfg.Brokers))
	for _, b := range cfg.Brokers {
		t := &target{audience: Audience(b), ns: b.Namespace}
		for i := range cfg.EventPolicies {
			p := &cfg.EventPolicies[i]
			if p.Namespace == b.Namespace && appliesTo(p, b) {
				t.policies = append(t.policies, p)
			}
		}
		// An invalid policy fails closed: the default mode no longer applies to what it
		// names, and it lets no one in.
		for i := range cfg.InvalidEventPolicies {
			p := &cfg.InvalidEventPolicies[i]
			if p.Namespace == b.Namespace && appliesTo(p, b) {
				t.invalid = append(t.invalid, p)
			}
		}
		m[b.Key()] = t
	}
	a.targets.Store(&m)
}

func appliesTo(p *config.EventPolicy, b config.Broker) bool {
	if len(p.To) == 0 {
		return true
	}
	for _, t := range p.To {
		if t.Selects(b) {
			return true
		}
	}
	return false
}

// Authorize decides whether r may post to the broker or channel key. See
// broker.Authorizer.
func (a *Authorizer) Authorize(r *http.Request, key string) broker.Decision {
	t := (*a.targets.Load())[key]
	if t == nil {
		return broker.Decision{Status: http.StatusForbidden, Reason: "no broker or channel at /" + key + " is known to the authorizer"}
	}
	sub, err := a.sender(r.Context(), r, t.audience)
	if err != nil {
		return broker.Decision{Status: http.StatusUnauthorized, Reason: err.Error()}
	}
	return a.decide(t, key, sub)
}

// AuthorizeSender decides whether the proven identity sender may post to the broker or
// channel key: the default mode and the EventPolicies, as for a request. See
// broker.Authorizer.
func (a *Authorizer) AuthorizeSender(sender, key string) broker.Decision {
	t := (*a.targets.Load())[key]
	if t == nil {
		return broker.Decision{Status: http.StatusForbidden, Sender: sender, Reason: "no broker or channel at /" + key + " is known to the authorizer"}
	}
	return a.decide(t, key, sender)
}

// decide applies t's EventPolicies, or the default mode, to the proven subject sub.
func (a *Authorizer) decide(t *target, key, sub string) broker.Decision {
	if len(t.policies) == 0 && len(t.invalid) == 0 {
		switch a.opts.mode {
		case AllowAll:
			return broker.Decision{Sender: sub}
		case AllowSameNamespace:
			if strings.HasPrefix(sub, "system:serviceaccount:"+t.ns+":") {
				return broker.Decision{Sender: sub}
			}
			return broker.Decision{Status: http.StatusForbidden, Sender: sub,
				Reason: fmt.Sprintf("%s may not send to /%s: no EventPolicy applies, and the default mode allow-same-namespace lets in only system:serviceaccount:%s:*", sub, key, t.ns)}
		default:
			return broker.Decision{Status: http.StatusForbidden, Sender: sub,
				Reason: fmt.Sprintf("%s may not send to /%s: no EventPolicy applies, and the default mode is deny-all", sub, key)}
		}
	}
	var filters []filter.Filter
	all := false
	for _, p := range t.policies {
		if !fromMatches(p, sub) {
			continue
		}
		if p.Filter == nil || p.Filter == filter.MatchAll {
			all = true
		} else {
			filters = append(filters, p.Filter)
		}
	}
	switch {
	case all:
		return broker.Decision{Sender: sub}
	case len(filters) > 0:
		return broker.Decision{Sender: sub, Filters: filters}
	}
	reason := fmt.Sprintf("%s may not send to /%s: no EventPolicy for it lets this subject in", sub, key)
	if len(t.invalid) > 0 {
		p := t.invalid[0]
		name := "EventPolicy " + p.Key()
		if p.Name == "" {
			name = "an EventPolicy of namespace " + p.Namespace
		}
		reason += " (" + name + " applies to it and is invalid: it lets no one in until it is fixed)"
	}
	return broker.Decision{Status: http.StatusForbidden, Sender: sub, Reason: reason}
}

func fromMatches(p *config.EventPolicy, sub string) bool {
	for _, f := range p.From {
		if f.Matches(sub) {
			return true
		}
	}
	return false
}

// sender returns the subject r proves: its bearer token's (which must name audience),
// else its verified client certificate's common name. The error is one line and never
// holds the token.
func (a *Authorizer) sender(ctx context.Context, r *http.Request, audience string) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		raw, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			if i := strings.IndexByte(h, ' '); i > 0 && strings.EqualFold(h[:i], "bearer") {
				raw, ok = h[i+1:], true
			}
		}
		raw = strings.TrimSpace(raw)
		switch {
		case !ok:
			return "", errors.New("the Authorization header is not a Bearer token")
		case a.opts.internal != nil && isInternal(raw):
			if sub, ok := a.opts.internal.subject(raw); ok {
				return sub, nil
			}
			return "", errors.New("the internal token does not verify (it is good only in the process that made it)")
		case a.opts.verifier == nil:
			return "", errors.New("bearer tokens are not accepted here (no --oidc-issuer); send a client certificate")
		}
		c, err := a.opts.verifier.verify(ctx, raw)
		if err != nil {
			return "", err
		}
		for _, aud := range c.audience {
			if aud == audience {
				return c.subject, nil
			}
		}
		return "", fmt.Errorf("the token's audience %q does not include %q", strings.Join(c.audience, ","), audience)
	}
	if a.opts.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		if cn := r.TLS.PeerCertificates[0].Subject.CommonName; cn != "" {
			return cn, nil
		}
		return "", errors.New("the client certificate's subject has no common name")
	}
	if a.opts.verifier != nil {
		return "", errors.New("missing Authorization: Bearer token")
	}
	return "", errors.New("missing client certificate")
}

// oneLine keeps a reason to one line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }
