package kinesis

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluice-broker/sluice/event"
)

// A record's data holds one event and the subscriptions it was routed to:
//
//	byte 0x53 ('S'), byte 1 (frame version)
//	uvarint count of routes, then per route: uvarint length, the subscription name
//	the event in event.AppendBinary's encoding (every attribute and extension by name,
//	then the data bytes unchanged)
//
// Kinesis records have no headers, so unlike the kafka channel's records (CloudEvents'
// Kafka binding, ce_ headers) the attributes must travel in the data. This framing keeps
// every attribute and the data byte for byte, costs a few bytes over the event itself
// (a structured-mode JSON record would base64 binary data, a third more PUT payload, and
// need a JSON parse per record), and is the codec the jetstream channel already stores.
const (
	frameMagic   = 'S'
	frameVersion = 1
)

var errFrame = errors.New("kinesis: record is not a Sluice event frame")

// appendFrame appends the frame of e routed to subs to dst.
func appendFrame(dst []byte, e *event.Event, subs []string) []byte {
	dst = append(dst, frameMagic, frameVersion)
	dst = binary.AppendUvarint(dst, uint64(len(subs)))
	for _, s := range subs {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return event.AppendBinary(dst, e)
}

// readRoutes returns the routes of the frame in b and the offset of its event.
func readRoutes(b []byte) (routes []string, rest int, err error) {
	if len(b) < 2 || b[0] != frameMagic {
		return nil, 0, errFrame
	}
	if b[1] != frameVersion {
		return nil, 0, fmt.Errorf("%w: version %d", errFrame, b[1])
	}
	i := 2
	n, k := binary.Uvarint(b[i:])
	if k <= 0 || n > uint64(len(b)) {
		return nil, 0, fmt.Errorf("%w: route count", errFrame)
	}
	i += k
	routes = make([]string, 0, n)
	for range n {
		l, k := binary.Uvarint(b[i:])
		if k <= 0 || l > uint64(len(b)-i-k) {
			return nil, 0, fmt.Errorf("%w: route", errFrame)
		}
		i += k
		routes = append(routes, string(b[i:i+int(l)]))
		i += int(l)
	}
	return routes, i, nil
}

// decodeFrame returns the event and routes of the frame in b. The event's data aliases b.
func decodeFrame(b []byte) (*event.Event, []string, error) {
	routes, i, err := readRoutes(b)
	if err != nil {
		return nil, nil, err
	}
	e, err := event.DecodeBinary(b[i:])
	if err != nil {
		return nil, nil, fmt.Errorf("kinesis: %w", err)
	}
	return e, routes, nil
}
