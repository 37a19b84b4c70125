package rabbitmq

import (
	"slices"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/event"
)

// FuzzDecodeDelivery feeds deliveries with arbitrary headers (as another producer may
// publish them to a queue Sluice reads) through the decoder: it must never panic, and an
// event it decodes must come out of a round trip through encode unchanged.
func FuzzDecodeDelivery(f *testing.F) {
	f.Add("ce-id", "1", "ce-source", "/s", "ce-type", "t", "ce-partitionkey", "k", "BCC", "a", "text/plain", []byte("x"))
	f.Add("ce-specversion", "1.0", "ce-", "", "ce-time", "2026-01-01T00:00:00Z", "x-death", "1", "ce-datacontenttype", "a/b", "", []byte(nil))
	f.Add("ce-ID", "\xff", "ce-data", "x", "content-type", "c/d", "ce-x", "y", "ce-subject", "s", "application/json", []byte("{}"))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3, k4, v4, k5, v5, contentType string, body []byte) {
		d := &amqp.Delivery{ContentType: contentType, Body: body, Headers: amqp.Table{}}
		for i, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}, {k4, v4}, {k5, v5}} {
			if i%2 == 0 {
				d.Headers[kv[0]] = kv[1]
			} else {
				d.Headers[kv[0]] = []byte(kv[1]) // another producer's byte arrays
			}
		}
		d.Headers["ce-n"] = int64(len(body)) // and numbers
		e := decode(d)
		pub, size, err := encode(e)
		if err != nil {
			for _, x := range e.Extensions {
				if len(headerPrefix)+len(x.Name) > maxHeaderName {
					return // a name AMQP cannot carry
				}
			}
			t.Fatalf("encode: %v", err)
		}
		if size < len(e.Data) {
			t.Fatalf("size %d, under the data's %d bytes", size, len(e.Data))
		}
		if err := pub.Headers.Validate(); err != nil {
			t.Fatalf("headers AMQP cannot write: %v", err)
		}
		again := decode(&amqp.Delivery{ContentType: pub.ContentType, Headers: pub.Headers, Body: pub.Body})
		if !sameEvent(e, again) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, again)
		}
	})
}

// sameEvent compares two events whatever the order of their extensions (headers are a
// map).
func sameEvent(a, b *event.Event) bool {
	sorted := func(e *event.Event) string {
		c := e.Clone()
		slices.SortFunc(c.Extensions, func(x, y event.Extension) int {
			if x.Name < y.Name {
				return -1
			}
			if x.Name > y.Name {
				return 1
			}
			return 0
		})
		return string(event.AppendBinary(nil, c))
	}
	return sorted(a) == sorted(b)
}
