package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// FuzzDecodeRecord feeds records with arbitrary headers (as another producer may write
// them to a topic Sluice reads) through the decoder: it must never panic, and an event
// it decodes must come out of a round trip through fillRecord unchanged.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("ce_id", "1", "ce_source", "/s", "ce_type", "t", "content-type", "text/plain", "sluice-sub", "a", []byte("x"))
	f.Add("ce_specversion", "1.0", "ce_partitionkey", "k", "ce_", "", "ce_time", "2026-01-01T00:00:00Z", "sluice-sub", "", []byte(nil))
	f.Add("ce_ID", "\xff", "ce_datacontenttype", "a/b", "content-type", "c/d", "ce_data", "x", "ce_x", "y", []byte("{}"))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3, k4, v4, k5, v5 string, value []byte) {
		r := &kgo.Record{Value: value}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}, {k4, v4}, {k5, v5}} {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
		}
		e := decodeRecord(r)
		_ = routedTo(r, v5)
		var out kgo.Record
		fillRecord(&out, "t", &channel.Envelope{Event: e, Subscriptions: []string{"s"}})
		if !routedTo(&out, "s") {
			t.Fatal("a filled record is not routed to its subscription")
		}
		again := decodeRecord(&out)
		if !sameEvent(e, again) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, again)
		}
	})
}

func sameEvent(a, b *event.Event) bool {
	return string(event.AppendBinary(nil, a)) == string(event.AppendBinary(nil, b))
}
