package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/dlq"
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

// FuzzDecodeDLQRecord feeds arbitrary records of the dead-letter topic (anyone who can
// write to it can write them) through the decoder: it must never panic, and an entry it
// decodes must come out of a round trip unchanged.
func FuzzDecodeDLQRecord(f *testing.F) {
	f.Add([]byte("ns/t\x00id"), encodeDLQValue(&dlq.Entry{Attempts: 2, Code: 500, Dest: "http://x", Reason: "boom",
		Event: &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: []byte("d")}}))
	f.Add([]byte("ns/t\x00id"), encodeDLQValue(&dlq.Entry{Time: time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC),
		Event: &event.Event{SpecVersion: "1.0", ID: "2", Source: "/s", Type: "t"}}))
	f.Add([]byte("ns/t\x00id"), []byte(nil))
	f.Add([]byte("\x00"), []byte{0})
	f.Add([]byte("a\x00b"), []byte{2, '{', '}', 1, 0})
	f.Add([]byte("a\x00b"), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		trigger, e, err := decodeDLQRecord(key, value)
		if err != nil || value == nil {
			return
		}
		t2, again, err := decodeDLQRecord(key, encodeDLQValue(&e))
		if err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if t2 != trigger || string(encodeDLQValue(&again)) != string(encodeDLQValue(&e)) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, again)
		}
	})
}
