package rabbitmq

import (
	"testing"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
)

// FuzzDecodeDLQ feeds arbitrary messages of the dead-letter stream (any client that
// reaches it may write one) to the decoder the reader uses: it never panics, what it
// accepts is of a known kind and names a trigger (but a sync), and an entry it accepts
// comes out of a round trip through encodeDLQ unchanged.
func FuzzDecodeDLQ(f *testing.F) {
	e := dlqtest.Entry("x", 3)
	f.Add(encodeDLQ(dlqKindEntry, "ns/t", dlq.Encode(&e)))
	f.Add(encodeDLQ(dlqKindDelete, "ns/t", []byte{7}))
	f.Add(encodeDLQ(dlqKindPurge, "ns/t", nil))
	f.Add(encodeDLQ(dlqKindSync, "", nil))
	f.Add([]byte("e\x05ns/t"))
	f.Add([]byte(nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeDLQ(body)
		if err != nil {
			return
		}
		switch r.kind {
		case dlqKindEntry, dlqKindDelete, dlqKindPurge:
			if r.trigger == "" {
				t.Fatalf("accepted %q without a trigger", body)
			}
		case dlqKindSync:
		default:
			t.Fatalf("accepted %q of kind %q", body, r.kind)
		}
		if r.kind != dlqKindEntry {
			return
		}
		again, err := decodeDLQ(encodeDLQ(dlqKindEntry, r.trigger, dlq.Encode(&r.entry)))
		if err != nil || again.trigger != r.trigger || again.entry.Attempts != r.entry.Attempts ||
			again.entry.Reason != r.entry.Reason || again.entry.Event.ID != r.entry.Event.ID {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", body, again, err, r)
		}
	})
}
