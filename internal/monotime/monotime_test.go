package monotime

import (
	"strings"
	"testing"
	"time"
)

func TestNow(t *testing.T) {
	before := time.Now()
	got := Now()
	after := time.Now()
	if got.Before(before) || got.After(after) {
		t.Fatalf("Now() = %v, not between %v and %v", got, before, after)
	}
	if !strings.Contains(got.String(), " m=+") { // String shows the monotonic reading, if any
		t.Fatal("Now() carries no monotonic reading")
	}
	// Durations and deadlines against it are measured on the monotonic clock.
	// (An hour ahead: however long a loaded machine holds this goroutine between the two
	// reads, the deadline is still ahead.)
	dl := got.Add(time.Hour)
	if d := time.Until(dl); d <= 0 || d > time.Hour {
		t.Fatalf("time.Until(Now()+1h) = %v", d)
	}
	time.Sleep(10 * time.Millisecond)
	if d := Now().Sub(got); d < 10*time.Millisecond {
		t.Fatalf("10 ms later, Now().Sub = %v", d)
	}
}

// BenchmarkNow compares Now with time.Now, the read it replaces on hot paths.
func BenchmarkNow(b *testing.B) {
	b.Run("monotime.Now", func(b *testing.B) {
		var t time.Time
		for b.Loop() {
			t = Now()
		}
		_ = t
	})
	b.Run("time.Now", func(b *testing.B) {
		var t time.Time
		for b.Loop() {
			t = time.Now()
		}
		_ = t
	})
}
