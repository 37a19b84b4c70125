package kafka

import (
	"testing"
	"time"
)

// TestMarkerMeta: a catch-up marker offset's metadata records where the catch-up begins
// and the end of its grace after routing; markers written before the grace existed
// ("low=N" alone) and fields it does not know read as before.
func TestMarkerMeta(t *testing.T) {
	grace := time.UnixMilli(1_800_000_000_123)
	for _, tt := range []struct {
		name      string
		meta      string
		low       int64
		has       bool
		grace     time.Time
		roundTrip bool
	}{
		{"empty", "", 0, false, time.Time{}, true},
		{"low alone", "low=42", 42, true, time.Time{}, true},
		{"grace alone", "grace=1800000000123", 0, false, grace, true},
		{"both", "low=7 grace=1800000000123", 7, true, grace, true},
		{"unknown field", "x=1 low=3", 3, true, time.Time{}, false},
		{"bad numbers", "low=x grace=-5", 0, false, time.Time{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			low, has, g := parseMarkerMeta(tt.meta)
			if low != tt.low || has != tt.has || !g.Equal(tt.grace) {
				t.Fatalf("parseMarkerMeta(%q) = %d, %v, %v; want %d, %v, %v", tt.meta, low, has, g, tt.low, tt.has, tt.grace)
			}
			if got := markerMeta(low, has, g); tt.roundTrip && got != tt.meta {
				t.Fatalf("markerMeta = %q, want %q", got, tt.meta)
			}
		})
	}
}

// FuzzMarkerMeta feeds arbitrary metadata of a catch-up marker's offset (any client that
// reaches the cluster may commit to the group) to its reader: it never panics, and what
// it reads comes back the same through markerMeta.
func FuzzMarkerMeta(f *testing.F) {
	f.Add("low=42")
	f.Add("low=7 grace=1800000000123")
	f.Add("grace=1800000000123")
	f.Add("low=-1 grace=x  low=9")
	f.Fuzz(func(t *testing.T, meta string) {
		low, has, grace := parseMarkerMeta(meta)
		low2, has2, grace2 := parseMarkerMeta(markerMeta(low, has, grace))
		if low2 != low || has2 != has || !grace2.Equal(grace) {
			t.Fatalf("%q read as %d, %v, %v; written and read again as %d, %v, %v", meta, low, has, grace, low2, has2, grace2)
		}
	})
}
