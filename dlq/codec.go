package dlq

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-broker/sluice/event"
)

// ErrCorrupt is the error Decode wraps when its input is not an encoded entry.
var ErrCorrupt = errors.New("corrupt dead-letter entry")

// meta is what an encoded entry keeps besides its event.
type meta struct {
	Attempts int    `json:"a"`
	Code     int    `json:"c"`
	Dest     string `json:"d"`
	Reason   string `json:"r"`
	Time     int64  `json:"t,omitempty"` // when it was stored, Unix nanoseconds; absent when zero
}

// Encode writes e as durable stores keep it: the uvarint length of the JSON of its
// attempts, code, destination, reason and (unless zero) time, that JSON, then the event
// in the binary codec of package event. Its ID is not written: a store derives it.
func Encode(e *Entry) []byte {
	m := meta{Attempts: e.Attempts, Code: e.Code, Dest: e.Dest, Reason: e.Reason}
	if !e.Time.IsZero() {
		m.Time = e.Time.UnixNano()
	}
	js, _ := json.Marshal(m) // a struct of ints and strings
	b := binary.AppendUvarint(make([]byte, 0, len(js)+e.Event.Size()+binary.MaxVarintLen64), uint64(len(js)))
	return event.AppendBinary(append(b, js...), e.Event)
}

// Decode reads what Encode wrote; an error wraps ErrCorrupt. The event's data aliases b.
func Decode(b []byte) (Entry, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return Entry{}, fmt.Errorf("%w: metadata length", ErrCorrupt)
	}
	var m meta
	if err := json.Unmarshal(b[k:k+int(n)], &m); err != nil {
		return Entry{}, fmt.Errorf("%w: metadata: %w", ErrCorrupt, err)
	}
	ev, err := event.DecodeBinary(b[k+int(n):])
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	e := Entry{Attempts: m.Attempts, Code: m.Code, Dest: m.Dest, Reason: m.Reason, Event: ev}
	if m.Time != 0 {
		e.Time = time.Unix(0, m.Time).UTC()
	}
	return e, nil
}
