package channel

import "errors"

// Refusal is a Publish error in two parts: the reason the sender may be told, and the
// backend's own error, which is for the operator's log only. A backend's words may name
// its hosts and ports, its topics and streams, a cloud account, role or request ID:
// nothing a client posting events should learn from a 429 or a 503 (docs/security.md,
// "What a refused request is told").
type Refusal struct {
	// Kind is ErrFull, ErrUnavailable or ErrTooLarge: what ingress answers (429, 503 or
	// 413).
	Kind error
	// Reason is one line a sender may read: what happened, in words that name nothing of
	// the deployment behind the channel.
	Reason string
	// Cause is the backend's error, or nil.
	Cause error
}

// Refuse returns a *Refusal of kind (ErrFull, ErrUnavailable or ErrTooLarge) with reason
// for the sender and cause (may be nil) for the log.
func Refuse(kind error, reason string, cause error) error {
	return &Refusal{Kind: kind, Reason: reason, Cause: cause}
}

// Error is the whole error, cause included: for logs, not for senders (Reason).
func (r *Refusal) Error() string {
	s := r.Kind.Error() + ": " + r.Reason
	if r.Cause != nil {
		s += ": " + r.Cause.Error()
	}
	return s
}

// Unwrap gives errors.Is and errors.As the kind and the cause.
func (r *Refusal) Unwrap() []error {
	if r.Cause == nil {
		return []error{r.Kind}
	}
	return []error{r.Kind, r.Cause}
}

// kinds are the errors a Channel's Publish wraps, each with the reason a sender is told
// when the error carries no Refusal of its own.
var kinds = []struct {
	kind   error
	reason string
}{
	{ErrFull, "the channel has no room for the events now"},
	{ErrUnavailable, "the channel's store is unavailable"},
	{ErrTooLarge, "an event is larger than the channel stores"},
	{ErrClosed, "the channel is closed"},
}

// IsKind reports whether err wraps one of the channel's errors (ErrFull, ErrUnavailable,
// ErrTooLarge, ErrClosed; every Refusal does): a failure of the channel, as opposed to
// one of the caller's own making.
func IsKind(err error) bool {
	_, ok := kindReason(err)
	return ok
}

// kindReason is the fixed reason of the first of kinds err wraps, and whether it wraps
// one.
func kindReason(err error) (string, bool) {
	for _, k := range kinds {
		if errors.Is(err, k.kind) {
			return k.reason, true
		}
	}
	return "", false
}

// Reason is what the sender of events whose Publish failed with err may be told: the
// reason of the first *Refusal in err's chain, or, for an error that carries none, a
// fixed one by its kind. It never contains the rest of err.
func Reason(err error) string {
	if r, ok := errors.AsType[*Refusal](err); ok {
		return r.Reason
	}
	if reason, ok := kindReason(err); ok {
		return reason
	}
	return "the channel could not store the events"
}
