package bench

import (
	"time"

	"github.com/sluice-broker/sluice/loadtest/stats"
)

// Backlog is the outcome of a --backlog run: the load sent its events while the
// receiver refused them (503), then the receiver opened and the target drained.
type Backlog struct {
	Requested uint64 `json:"requested_events"` // --backlog N
	// Events counts the events the target accepted (2xx) while the receiver refused.
	Events uint64 `json:"backlog_events"`
	// Refused counts the delivery requests the receiver answered 503.
	Refused uint64 `json:"refused_requests"`
	// OpenedAt is when the receiver began to accept, from the load's start.
	OpenedAt time.Duration `json:"receiver_opened_at_ns"`
	// Drained says every accepted event arrived within --settle of the opening.
	Drained bool `json:"drained"`
	// DrainTime runs from the receiver opening until the last accepted event arrived
	// (until --settle ran out when not Drained).
	DrainTime time.Duration `json:"drain_time_ns"`
	// CatchUpEvents counts the events delivered while draining.
	CatchUpEvents uint64 `json:"catch_up_events"`
	// CatchUpRate is CatchUpEvents / DrainTime, in events/s.
	CatchUpRate float64 `json:"catch_up_events_per_second"`
	// PeakCatchUp is the busiest whole second of the drain, in events.
	PeakCatchUp uint64 `json:"catch_up_peak_events_per_second"`
}

// catchUp fills b's catch-up figures from the events delivered while draining and the
// receiver's per-second series (second i counts from the load's start): the rate over
// the drain, and the busiest second that overlaps it.
func catchUp(b *Backlog, delivered uint64, rs []stats.RecvSecond) {
	b.CatchUpEvents = delivered
	if b.DrainTime > 0 {
		b.CatchUpRate = float64(delivered) / b.DrainTime.Seconds()
	}
	from, to := b.OpenedAt, b.OpenedAt+b.DrainTime
	b.PeakCatchUp = 0
	for _, s := range rs {
		lo, hi := time.Duration(s.T)*time.Second, time.Duration(s.T+1)*time.Second
		if hi > from && lo <= to {
			b.PeakCatchUp = max(b.PeakCatchUp, s.Events)
		}
	}
}
