package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/sluice-broker/sluice/config"
)

// internalPrefix starts every internal token.
const internalPrefix = "sluice."

// Internal mints and verifies the tokens of Sluice's own sends to its own ingress: a
// Trigger or Subscription delivering or replying to a broker or channel of the same
// process, a PingSource whose sink is one. Each send carries the identity of the object
// that sends, as Knative's dispatcher and sources do with their OIDC service accounts
// (Subject), so that the default mode and the EventPolicies judge it like any sender's.
//
// A token is "sluice.<subject, base64url>.<HMAC-SHA256 of it, base64url>" under a key
// drawn at random when the process starts: it proves nothing to another process and
// dies with this one. Sluice sends it only to its own listen address. Safe for
// concurrent use.
type Internal struct {
	key []byte
}

// NewInternal returns an Internal with a fresh random key.
func NewInternal() (*Internal, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("auth: the internal identity's key: %w", err)
	}
	return &Internal{key: key}, nil
}

// Sender returns the identity of the object kind namespace/name (Subject) and the
// Authorization header value that proves it to this process's Authorizer
// (WithInternal). It implements broker.Identities.
func (in *Internal) Sender(kind, namespace, name string) (subject, authorization string) {
	subject = Subject(kind, namespace, name)
	return subject, in.authorization(subject)
}

// authorization returns the Authorization header value that proves subject.
func (in *Internal) authorization(subject string) string {
	return "Bearer " + internalPrefix + base64.RawURLEncoding.EncodeToString([]byte(subject)) + "." +
		base64.RawURLEncoding.EncodeToString(in.mac(subject))
}

func (in *Internal) mac(subject string) []byte {
	m := hmac.New(sha256.New, in.key)
	m.Write([]byte(subject))
	return m.Sum(nil)
}

// subject returns the subject raw proves; ok is false when raw is not one of this
// Internal's tokens.
func (in *Internal) subject(raw string) (sub string, ok bool) {
	rest, found := strings.CutPrefix(raw, internalPrefix)
	if !found {
		return "", false
	}
	s64, m64, found := strings.Cut(rest, ".")
	if !found {
		return "", false
	}
	s, err1 := base64.RawURLEncoding.DecodeString(s64)
	m, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil || !hmac.Equal(m, in.mac(string(s))) {
		return "", false
	}
	return string(s), true
}

// isInternal reports whether raw has the form of an internal token (it need not verify).
func isInternal(raw string) bool { return strings.HasPrefix(raw, internalPrefix) }

// Subject is the identity of a Sluice object that sends events, as Knative names the
// OIDC service account it makes for it: system:serviceaccount:<namespace>:<name>-oidc-
// <group>-<kind>, lower-cased. kind is "Trigger", "Subscription" or "PingSource". An
// EventPolicy's spec.from ref to the object resolves to the same subject.
func Subject(kind, namespace, name string) string {
	group := "eventing.knative.dev"
	switch kind {
	case "Subscription":
		group = "messaging.knative.dev"
	case "PingSource":
		group = "sources.knative.dev"
	}
	return config.ServiceAccountSubject(namespace, config.OIDCServiceAccountName(group, kind, name))
}
