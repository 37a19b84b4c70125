package jetstream

import (
	"testing"

	"github.com/sluice-broker/sluice/event"
)

// FuzzDecodeStored feeds arbitrary stored message data (what a consumer fetches from the
// stream: event.AppendBinary's encoding) through the decoder the consumer uses: it must
// never panic, and what it decodes must re-encode to an encoding that decodes to the
// same event.
func FuzzDecodeStored(f *testing.F) {
	f.Add(event.AppendBinary(nil, &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: []byte(`{"a":1}`)}))
	f.Add(event.AppendBinary(nil, &event.Event{SpecVersion: "1.0", ID: "é", Source: "/s", Type: "t",
		Extensions: []event.Extension{{Name: "partitionkey", Value: "k"}, {Name: "knativebrokerttl", Value: "255"}}}))
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := event.DecodeBinary(b)
		if err != nil {
			return
		}
		enc := event.AppendBinary(nil, e)
		again, err := event.DecodeBinary(enc)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v", err)
		}
		if string(event.AppendBinary(nil, again)) != string(enc) {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, again)
		}
	})
}
