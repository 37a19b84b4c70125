package delivery

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-broker/sluice/event"
)

// DeadLetter describes an event whose delivery failed for good: it went to the
// dead-letter sink, or nowhere. The dashboard lists the last ones (GET /ui).
type DeadLetter struct {
	Time    time.Time `json:"time"`
	Trigger string    `json:"trigger"`
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Source  string    `json:"source"`
	// Outcome is dead_lettered (the sink accepted it, or it was stored for the sink on a
	// durable channel), stored (kept in the dead-letter store: no sink), no_sink or
	// sink_failed (undeliverable, logged).
	Outcome string `json:"outcome"`
	// Dest, Code and Reason are the knativeerrordest, knativeerrorcode and the start of
	// the decoded knativeerrordata of the failure.
	Dest   string `json:"dest"`
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// DeadLetterHook is told about every dead-lettered or undeliverable event, on the
// delivering goroutine: it must return at once.
type DeadLetterHook func(DeadLetter)

// WithDeadLetterHook calls h for every event dead-lettered or undeliverable. Default:
// nil, none.
func WithDeadLetterHook(h DeadLetterHook) Option { return func(d *Dispatcher) { d.dlHook = h } }

// maxReason bounds DeadLetter.Reason.
const maxReason = 200

// noteDeadLetter tells the hook, if any, about dl (the event with the error
// extensions) of trigger t.
func (d *Dispatcher) noteDeadLetter(t string, dl *event.Event, outcome string) {
	if d.dlHook == nil || dl == nil {
		return
	}
	r := DeadLetter{Time: time.Now(), Trigger: t, ID: dl.ID, Type: dl.Type, Source: dl.Source, Outcome: outcome}
	r.Dest, _ = dl.Get(ExtErrorDest)
	code, _ := dl.Get(ExtErrorCode)
	r.Code, _ = strconv.Atoi(code)
	if data, ok := dl.Get(ExtErrorData); ok {
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			b = []byte(data)
		}
		if len(b) > maxReason {
			b = b[:maxReason]
		}
		r.Reason = strings.ToValidUTF8(strings.TrimSpace(string(b)), string(utf8.RuneError))
	}
	d.dlHook(r)
}
