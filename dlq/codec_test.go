package dlq

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/event"
)

func TestCodec(t *testing.T) {
	ev := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: []byte(`{"a":1}`)}
	for _, tc := range []struct {
		name string
		e    Entry
	}{
		{"without time", Entry{Attempts: 3, Code: 503, Dest: "http://x/", Reason: "down", Event: ev}},
		{"with time", Entry{Attempts: 1, Code: 500, Reason: "timeout", Event: ev, Time: time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(Encode(&tc.e))
			if err != nil {
				t.Fatal(err)
			}
			if got.Attempts != tc.e.Attempts || got.Code != tc.e.Code || got.Dest != tc.e.Dest || got.Reason != tc.e.Reason ||
				!got.Time.Equal(tc.e.Time) || got.Event.ID != ev.ID || string(got.Event.Data) != string(ev.Data) {
				t.Errorf("decoded %+v, want %+v", got, tc.e)
			}
		})
	}
	for _, bad := range [][]byte{nil, {0xff}, {5, '{'}, {2, '{', '}', 0xff}} {
		if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(%q): %v, want ErrCorrupt", bad, err)
		}
	}
}
