package overload

import (
	"fmt"
	"time"
)

// Defaults of Options (and of sluice serve's flags of the same names).
const (
	DefaultAdmitWait  = 400 * time.Millisecond
	DefaultRejectHold = 250 * time.Millisecond
)

// maxWait bounds AdmitWait and RejectHold: a client waits at most this long for an
// answer, or for its next request to be read, because of overload control.
const maxWait = 10 * time.Second

// Options are the knobs of overload control, one field per flag of sluice serve
// (docs/overload.md). The zero value is valid: no wait for room, no hold, no bound;
// DefaultOptions has sluice serve's defaults. Validate is the one place they are
// checked.
type Options struct {
	// AdmitWait is how long a request that finds its broker full waits for room, in
	// arrival order and before its body is read, before it is answered 429 (--admit-wait).
	// 0 refuses at once, and no connection waits for its turn. At most 10s.
	AdmitWait time.Duration
	// RejectHold is how long an HTTP/1.1 connection answered 429 is held before its next
	// request is read, jittered between ½ and 1× (--reject-hold). A request refused after
	// waiting for room holds its connection only for what is left. 0: off. At most 10s.
	RejectHold time.Duration
	// MaxBacklog is the events any one trigger of a broker may have stored and not yet
	// settled before ingress refuses the broker's requests (--max-backlog), on every
	// channel (a memory channel is bounded by its byte budget as well). It keeps a
	// durable channel's ingress from taking the CPU its delivery needs
	// (docs/decisions/0007-backlog-bound.md). 0: no bound.
	MaxBacklog int
	// MaxStoring is the requests one broker may store at once: let in and not yet stored
	// in its channel, a durable channel's acknowledgement included (--max-storing). More
	// wait for room as when the broker is full. Requests checked at the same moment on
	// different cores may each take the last place, so the bound can be passed by a few.
	// It keeps publishes awaiting an embedded JetStream's acknowledgement from taking the
	// CPU delivery needs; a channel whose acknowledgements take milliseconds (Kafka)
	// needs hundreds in flight, and too low a bound caps its ingress
	// (docs/decisions/0008-max-storing.md). The gauge sluice_ingress_storing_requests
	// shows the count per broker. 0: no bound.
	MaxStoring int
	// FixedInFlight turns the adaptive (AIMD) in-flight limit of deliveries off
	// (--fixed-in-flight): every trigger keeps its MaxInFlight attempts in flight
	// whatever its subscriber answers (InFlight).
	FixedInFlight bool
}

// DefaultOptions are sluice serve's defaults: requests wait DefaultAdmitWait for room,
// a refused connection is held DefaultRejectHold, no backlog or storing bound.
func DefaultOptions() Options {
	return Options{AdmitWait: DefaultAdmitWait, RejectHold: DefaultRejectHold}
}

// Validate reports the first option out of its range, naming the option and its flag.
func (o Options) Validate() error {
	switch {
	case o.AdmitWait < 0 || o.AdmitWait > maxWait:
		return fmt.Errorf("overload: AdmitWait (--admit-wait) %v: want 0 (refuse at once) up to %v", o.AdmitWait, maxWait)
	case o.RejectHold < 0 || o.RejectHold > maxWait:
		return fmt.Errorf("overload: RejectHold (--reject-hold) %v: want 0 (off) up to %v", o.RejectHold, maxWait)
	case o.MaxBacklog < 0:
		return fmt.Errorf("overload: MaxBacklog (--max-backlog) %d: want 0 (no bound) or more", o.MaxBacklog)
	case o.MaxStoring < 0:
		return fmt.Errorf("overload: MaxStoring (--max-storing) %d: want 0 (no bound) or more", o.MaxStoring)
	}
	return nil
}
