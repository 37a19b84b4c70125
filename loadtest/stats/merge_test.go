package stats

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The histogram of the union equals the merge of the parts, percentile by percentile.
func TestHistMergeEqualsUnion(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	union := NewHist()
	parts := []*hdrhistogram.Histogram{NewHist(), NewHist(), NewHist()}
	for i := range 30000 {
		d := time.Duration(rng.ExpFloat64()*float64(2*time.Millisecond)) + time.Duration(i%7)*time.Microsecond
		Record(parts[i%3], d)
		Record(union, d)
	}
	merged := NewHist()
	for _, h := range parts {
		if dropped := merged.Merge(h); dropped != 0 {
			t.Fatalf("merge dropped %d values", dropped)
		}
	}
	if merged.TotalCount() != union.TotalCount() || merged.Min() != union.Min() || merged.Max() != union.Max() {
		t.Fatalf("count/min/max %d %d %d, want %d %d %d", merged.TotalCount(), merged.Min(), merged.Max(), union.TotalCount(), union.Min(), union.Max())
	}
	for q := 0.0; q <= 100; q += 0.01 {
		if g, w := merged.ValueAtQuantile(q), union.ValueAtQuantile(q); g != w {
			t.Fatalf("p%g = %d, want %d", q, g, w)
		}
	}
	if Summarize(merged) != Summarize(union) {
		t.Errorf("summary %+v, want %+v", Summarize(merged), Summarize(union))
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
