package stats

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The histogram of the union equals the merge of the parts: bucket by bucket, and so
// in every percentile and summary figure.
func TestHistMergeEqualsUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name  string
		parts int
		n     int
		value func(i int) (part int, d time.Duration) // the i-th value and the part it goes to
	}{
		{"exponential, round robin", 3, 30000, func(i int) (int, time.Duration) {
			return i % 3, time.Duration(rng.ExpFloat64()*float64(2*time.Millisecond)) + time.Duration(i%7)*time.Microsecond
		}},
		{"disjoint ranges", 3, 3000, func(i int) (int, time.Duration) {
			return i % 3, time.Duration(i%3)*time.Second + time.Duration(i)*time.Microsecond
		}},
		{"clamped at both ends", 3, 300, func(i int) (int, time.Duration) {
			return i % 3, []time.Duration{0, time.Hour, 123 * time.Microsecond}[i%3]
		}},
		{"one part empty", 3, 1000, func(i int) (int, time.Duration) { return i % 2, time.Duration(i) * time.Microsecond }},
		{"single part", 1, 1000, func(int) (int, time.Duration) { return 0, time.Duration(rng.IntN(5_000_000)) * time.Microsecond }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			union := NewHist()
			parts := make([]*hdrhistogram.Histogram, tt.parts)
			for i := range parts {
				parts[i] = NewHist()
			}
			for i := range tt.n {
				p, d := tt.value(i)
				Record(parts[p], d)
				Record(union, d)
			}
			merged := NewHist()
			for _, h := range parts {
				if dropped := merged.Merge(h); dropped != 0 {
					t.Fatalf("merge dropped %d values", dropped)
				}
			}
			if merged.TotalCount() != int64(tt.n) {
				t.Errorf("count %d, want %d", merged.TotalCount(), tt.n)
			}
			assertHistEqual(t, merged, union)
		})
	}
}

// assertHistEqual fails unless got and want hold the same count in every bucket.
func assertHistEqual(t *testing.T, got, want *hdrhistogram.Histogram) {
	t.Helper()
	g, w := got.Export(), want.Export()
	if g.LowestTrackableValue != w.LowestTrackableValue || g.HighestTrackableValue != w.HighestTrackableValue || g.SignificantFigures != w.SignificantFigures {
		t.Fatalf("geometry %d..%d/%d, want %d..%d/%d", g.LowestTrackableValue, g.HighestTrackableValue, g.SignificantFigures,
			w.LowestTrackableValue, w.HighestTrackableValue, w.SignificantFigures)
	}
	if len(g.Counts) != len(w.Counts) {
		t.Fatalf("%d buckets, want %d", len(g.Counts), len(w.Counts))
	}
	for i := range g.Counts {
		if g.Counts[i] != w.Counts[i] {
			t.Fatalf("bucket %d: count %d, want %d", i, g.Counts[i], w.Counts[i])
		}
	}
	if !got.Equals(want) {
		t.Fatal("histograms differ (Equals)")
	}
	if got.TotalCount() != want.TotalCount() || got.Min() != want.Min() || got.Max() != want.Max() {
		t.Fatalf("count/min/max %d %d %d, want %d %d %d", got.TotalCount(), got.Min(), got.Max(), want.TotalCount(), want.Min(), want.Max())
	}
	for q := 0.0; q <= 100; q += 0.01 {
		if g, w := got.ValueAtQuantile(q), want.ValueAtQuantile(q); g != w {
			t.Fatalf("p%g = %d, want %d", q, g, w)
		}
	}
	if Summarize(got) != Summarize(want) {
		t.Errorf("summary %+v, want %+v", Summarize(got), Summarize(want))
	}
}

func TestMergeLoadSeconds(t *testing.T) {
	a := []LoadSecond{{T: 0, Intended: 100, Sent: 100, Done: 99, OK: 99, P99: 2, InFlight: 1}, {T: 1, Intended: 100, Sent: 100, Done: 101, OK: 100, Failed: 1, P99: 5}}
	b := []LoadSecond{{T: 0, Intended: 100, Sent: 98, Done: 98, OK: 98, P99: 3}, {T: 2, Intended: 3, Sent: 3, Done: 5, OK: 5, P99: 1}}
	c := []LoadSecond{{T: 1, Intended: 100, Sent: 100, Done: 100, OK: 100, P99: 1, Warmup: true}}
	got := MergeLoadSeconds(a, b, c)
	want := []LoadSecond{
		{T: 0, Intended: 200, Sent: 198, Done: 197, OK: 197, P99: 3, InFlight: 1},
		{T: 1, Intended: 200, Sent: 200, Done: 201, OK: 200, Failed: 1, P99: 5, Warmup: true},
		{T: 2, Intended: 3, Sent: 3, Done: 5, OK: 5, P99: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestMergeRecvSeconds(t *testing.T) {
	a := []RecvSecond{{T: 0, Events: 10, P99: 1}, {T: 1, Events: 20, Duplicates: 1, P99: 4}}
	b := []RecvSecond{{T: 0, Events: 5, P99: 2}} // epoch one second later than a's
	got := MergeRecvSeconds([]int{0, 1}, a, b)
	want := []RecvSecond{{T: 0, Events: 10, P99: 1}, {T: 1, Events: 25, Duplicates: 1, P99: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestBitsetUnionAndEncoding(t *testing.T) {
	tests := []struct {
		name       string
		a, b       []uint64
		wantCommon uint64
		wantLen    uint64
		wantGaps   uint64
	}{
		{"disjoint halves", []uint64{0, 2, 4}, []uint64{1, 3, 5}, 0, 6, 0},
		{"overlap", []uint64{0, 1, 2}, []uint64{1, 2, 3}, 2, 4, 0},
		{"other longer", []uint64{5}, []uint64{1000}, 0, 2, 999},
		{"empty other", []uint64{3}, nil, 0, 1, 3},
		{"both empty", nil, nil, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b Bitset
			for _, s := range tt.a {
				a.Add(s)
			}
			for _, s := range tt.b {
				b.Add(s)
			}
			// round-trip b through its text form first
			text, err := b.MarshalText()
			if err != nil {
				t.Fatal(err)
			}
			var back Bitset
			if err := back.UnmarshalText(text); err != nil {
				t.Fatal(err)
			}
			if back.Len() != b.Len() || back.Max() != b.Max() || b.Missing(&back, nil) != 0 {
				t.Fatalf("round trip: len %d max %d, want %d %d", back.Len(), back.Max(), b.Len(), b.Max())
			}
			common := a.Union(&back)
			if common != tt.wantCommon || a.Len() != tt.wantLen || a.Gaps() != tt.wantGaps {
				t.Errorf("common %d len %d gaps %d, want %d %d %d", common, a.Len(), a.Gaps(), tt.wantCommon, tt.wantLen, tt.wantGaps)
			}
		})
	}
}

func TestBitsetUnmarshalRefuses(t *testing.T) {
	var b Bitset
	b.Add(3)
	good, _ := b.MarshalText()
	tests := []struct {
		name string
		text []byte
	}{
		{"not base64", []byte("!!!")},
		{"not deflate", []byte("AAAA")},
		{"truncated", good[:len(good)/2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var x Bitset
			if err := x.UnmarshalText(tt.text); err == nil {
				t.Errorf("UnmarshalText(%q) accepted", tt.text)
			}
		})
	}
	if !bytes.Equal(good, mustText(t, &b)) {
		t.Error("encoding is not deterministic")
	}
}

func mustText(t *testing.T, b *Bitset) []byte {
	t.Helper()
	text, err := b.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func FuzzBitsetUnmarshalText(f *testing.F) {
	var b Bitset
	for _, s := range []uint64{0, 1, 63, 64, 200} {
		b.Add(s)
	}
	f.Add(mustTextF(&b))
	f.Add([]byte(""))
	f.Add([]byte("AAAA"))
	f.Fuzz(func(t *testing.T, text []byte) {
		var x Bitset
		if err := x.UnmarshalText(text); err != nil {
			return
		}
		if x.Len() > x.Max() {
			t.Fatalf("len %d > max %d", x.Len(), x.Max())
		}
		again, err := x.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var y Bitset
		if err := y.UnmarshalText(again); err != nil || y.Len() != x.Len() || y.Max() != x.Max() {
			t.Fatalf("re-decode: %v, len %d max %d, want %d %d", err, y.Len(), y.Max(), x.Len(), x.Max())
		}
	})
}

func mustTextF(b *Bitset) []byte {
	text, err := b.MarshalText()
	if err != nil {
		panic(err)
	}
	return text
}
