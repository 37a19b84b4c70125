package delivery

import (
	"encoding/base64"
	"strconv"

	"github.com/sluice-broker/sluice/event"
)

// Extension attributes the dispatcher reads or writes.
const (
	// ExtTTL is Knative's loop guard, set by the broker's ingress and decremented on
	// every reply; stripped before delivery to subscribers.
	ExtTTL = "knativebrokerttl"
	// ExtPartitionKey orders events on an ordered target.
	ExtPartitionKey = "partitionkey"
	// ExtErrorDest is the URL whose delivery failed, on a dead-lettered event.
	ExtErrorDest = "knativeerrordest"
	// ExtErrorCode is the last HTTP status of a dead-lettered event; 500 when the last
	// attempt got no response (network error or timeout), as Knative does.
	ExtErrorCode = "knativeerrorcode"
	// ExtErrorData is the start (at most 1024 bytes) of the last failure's response
	// body, base64-encoded; for a network error, "dispatch error: " and the error.
	ExtErrorData = "knativeerrordata"
)

// DefaultTTL is the knativebrokerttl an event carries after its first ingest, and the
// most it may carry: the ingress lowers a larger one to it. A delivered event without
// the extension, or with a larger value, is treated as carrying it.
const DefaultTTL = 255

// deadLetterEvent returns a copy of e, without knativebrokerttl, carrying the error
// extensions.
func deadLetterEvent(e *event.Event, dest string, code int, data []byte) *event.Event {
	c := e.Clone()
	c.Delete(ExtTTL)
	c.Set(ExtErrorDest, dest)
	c.Set(ExtErrorCode, strconv.Itoa(code))
	if len(data) > maxErrData {
		data = data[:maxErrData]
	}
	if len(data) > 0 {
		c.Set(ExtErrorData, base64.StdEncoding.EncodeToString(data))
	}
	return c
}

// ttlOf reads knativebrokerttl; missing or invalid counts as DefaultTTL, and a value
// above it (an event stored before the ingress lowered such values) as DefaultTTL too.
func ttlOf(e *event.Event) int {
	v, ok := e.Get(ExtTTL)
	if !ok {
		return DefaultTTL
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return DefaultTTL
	}
	return min(n, DefaultTTL)
}
