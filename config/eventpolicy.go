package config

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-broker/sluice/filter"
)

// EventPolicy is a Knative EventPolicy (eventing.knative.dev/v1alpha1): who may send to
// which brokers and channels of its namespace, and which events. docs/security.md says
// how policies are applied.
type EventPolicy struct {
	Namespace, Name string
	// To are the brokers and channels of the namespace the policy applies to; empty
	// means every one of them.
	To []PolicyTarget
	// From are the subjects allowed to send: exact, or a prefix when Wildcard is set
	// (a sub ending in "*"). A spec.from ref is resolved to the subject Knative gives
	// that object's OIDC service account.
	From []PolicySubject
	// Filter must match an event for it to be allowed: at least one of spec.filters, as
	// Knative documents it; filter.MatchAll without filters.
	Filter filter.Filter
	// Filters is the spec the Filter was compiled from.
	Filters []filter.Spec
	// Source is the file the object was read from.
	Source string
	// Invalid, on a policy of Config.InvalidEventPolicies, is why it is not ready; such a
	// policy lets no one in. Empty on a ready policy.
	Invalid string
}

// Key returns "namespace/name".
func (p EventPolicy) Key() string { return p.Namespace + "/" + p.Name }

// invalidPolicies returns the EventPolicies of the load that are not ready, before a
// last good version stands in for any of them (Config.InvalidEventPolicies).
func (l *loader) invalidPolicies() []EventPolicy {
	var out []EventPolicy
	for _, p := range l.objects {
		if p.status.Skipped || !p.failed() || !strings.EqualFold(p.status.Kind, kindEventPolicy) {
			continue
		}
		ep := EventPolicy{Namespace: p.status.Namespace, Name: p.status.Name, Source: p.status.File, Invalid: strings.Join(p.reasons, "; ")}
		toRead := p.policy != nil
		for _, r := range p.reasons {
			if strings.HasPrefix(r, "spec.to") || strings.HasPrefix(r, "spec:") {
				toRead = false
			}
		}
		if toRead {
			ep.To = p.policy.To // else every broker and channel of the namespace
		}
		out = append(out, ep)
	}
	return out
}

// PolicyTarget is one entry of an EventPolicy's spec.to: a ref naming one broker or
// channel (Kind and Name), or a selector (Kind, which may be empty for any kind, and
// MatchLabels).
type PolicyTarget struct {
	Kind, Name  string
	MatchLabels map[string]string
}

// Selects reports whether the target names b (of the policy's namespace).
func (t PolicyTarget) Selects(b Broker) bool {
	if t.Kind != "" && t.Kind != b.Kind && !(t.Kind == kindBroker && b.Kind == "") {
		return false
	}
	if t.Name != "" {
		return t.Name == b.Name
	}
	for k, v := range t.MatchLabels {
		if w, ok := b.Labels[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// PolicySubject is one allowed subject of spec.from.
type PolicySubject struct {
	// Subject is the subject, without the trailing "*" of a wildcard.
	Subject string
	// Wildcard makes Subject a prefix.
	Wildcard bool
}

// Matches reports whether sub is this subject.
func (s PolicySubject) Matches(sub string) bool {
	if s.Wildcard {
		return strings.HasPrefix(sub, s.Subject)
	}
	return sub == s.Subject
}

// ServiceAccountSubject is the subject of a token Kubernetes issues to a service
// account: "system:serviceaccount:<namespace>:<name>".
func ServiceAccountSubject(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// OIDCServiceAccountName is the service account Knative makes for an object that sends
// events with OIDC (a source, a Trigger, a Subscription…): "<name>-oidc-<group>-<kind>",
// lower-cased.
func OIDCServiceAccountName(group, kind, name string) string {
	return strings.ToLower(name + "-oidc-" + group + "-" + kind)
}

const kindEventPolicy = "EventPolicy"

type policyRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
}

type policySelector struct {
	APIVersion       string            `json:"apiVersion"`
	Kind             string            `json:"kind"`
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions json.RawMessage   `json:"matchExpressions" unsupported:"give matchLabels"`
}

type policyTo struct {
	Ref      *policyRef      `json:"ref"`
	Selector *policySelector `json:"selector"`
}

type policyFrom struct {
	Ref *policyRef `json:"ref"`
	Sub *string    `json:"sub"`
}

type eventPolicySpec struct {
	To      []policyTo    `json:"to"`
	From    []policyFrom  `json:"from"`
	Filters []filter.Spec `json:"filters"`
}

// policyObj is a checked EventPolicy.
type policyObj struct{ EventPolicy }

// targetKind checks the kind of a spec.to entry: a broker or channel kind Sluice runs.
func (p *parsed) targetKind(path, apiVersion, kind string, required bool) string {
	if kind == "" {
		if required {
			p.fail("%s.kind: required", path)
		}
		return ""
	}
	group, _ := splitAPIVersion(apiVersion)
	switch kind {
	case kindBroker:
		if apiVersion != "" && group != groupEventing {
			p.fail("%s.apiVersion: %q: a Broker is %s", path, apiVersion, apiEventing)
		}
	case kindChannel, kindInMemory, kindKafkaChannel:
		if apiVersion != "" && group != groupMessaging {
			p.fail("%s.apiVersion: %q: a %s is %s/…", path, apiVersion, kind, groupMessaging)
		}
	default:
		p.fail("%s.kind: %q: Sluice applies EventPolicies to Brokers and channels (Channel, InMemoryChannel, KafkaChannel)", path, kind)
	}
	return kind
}

// eventPolicy checks an EventPolicy's spec.
func (p *parsed) eventPolicy(s *eventPolicySpec) *policyObj {
	ns := p.status.Namespace
	o := &policyObj{EventPolicy{Namespace: ns, Name: p.status.Name, Source: p.status.File, Filters: s.Filters}}
	for i, to := range s.To {
		path := fmt.Sprintf("spec.to[%d]", i)
		switch {
		case (to.Ref == nil) == (to.Selector == nil):
			p.fail("%s: give one of ref or selector", path)
		case to.Ref != nil:
			kind := p.targetKind(path+".ref", to.Ref.APIVersion, to.Ref.Kind, true)
			if to.Ref.Name == "" {
				p.fail("%s.ref.name: required", path)
			}
			if to.Ref.Namespace != "" && to.Ref.Namespace != ns {
				p.fail("%s.ref.namespace: %q: an EventPolicy applies to its own namespace (%s)", path, to.Ref.Namespace, ns)
			}
			o.To = append(o.To, PolicyTarget{Kind: kind, Name: to.Ref.Name})
		default:
			kind := p.targetKind(path+".selector", to.Selector.APIVersion, to.Selector.Kind, false)
			o.To = append(o.To, PolicyTarget{Kind: kind, MatchLabels: to.Selector.MatchLabels})
		}
	}
	if len(s.From) == 0 {
		p.fail("spec.from: required: at least one ref or sub")
	}
	for i, from := range s.From {
		path := fmt.Sprintf("spec.from[%d]", i)
		switch {
		case (from.Ref == nil) == (from.Sub == nil):
			p.fail("%s: give one of ref or sub", path)
		case from.Sub != nil:
			sub := *from.Sub
			if sub == "" {
				p.fail("%s.sub: empty", path)
				continue
			}
			wild := strings.HasSuffix(sub, "*")
			sub = strings.TrimSuffix(sub, "*")
			if strings.Contains(sub, "*") {
				p.fail("%s.sub: %q: a wildcard is a single * at the end", path, *from.Sub)
			}
			o.From = append(o.From, PolicySubject{Subject: sub, Wildcard: wild})
		default:
			r := from.Ref
			if r.Kind == "" || r.Name == "" || r.APIVersion == "" {
				p.fail("%s.ref: apiVersion, kind and name are required", path)
				continue
			}
			refNS := r.Namespace
			if refNS == "" {
				refNS = ns
			}
			group, _ := splitAPIVersion(r.APIVersion)
			sa := OIDCServiceAccountName(group, r.Kind, r.Name)
			if len(sa) > 63 {
				p.fail("%s.ref: the OIDC service account name of %s %s is longer than 63 characters, and Knative shortens it with a hash Sluice does not compute; give its subject in sub", path, r.Kind, r.Name)
				continue
			}
			o.From = append(o.From, PolicySubject{Subject: ServiceAccountSubject(refNS, sa)})
		}
	}
	// An event must match at least one of spec.filters, as Knative's documentation says
	// (its own example lists two filters no event could match both of).
	var any []filter.Spec
	if len(s.Filters) > 0 {
		any = []filter.Spec{{Any: s.Filters}}
	}
	f, err := filter.Compile(nil, any)
	if err != nil {
		for _, e := range unjoin(err) { // name the filter as written, not the any around it
			p.fail("spec.%s", strings.Replace(e.Error(), "filters[0].any[", "filters[", 1))
		}
	}
	o.Filter = f
	return o
}
