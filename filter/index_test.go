package filter

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-broker/sluice/event"
)

func TestIndexRoute(t *testing.T) {
	mustCompile := func(attrs map[string]string, filters ...Spec) Filter {
		f, err := Compile(attrs, filters)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	x := NewIndex([]IndexEntry{
		{"all", MatchAll},
		{"created", mustCompile(map[string]string{"type": "com.example.order.created"})},
		{"deleted", mustCompile(map[string]string{"type": "com.example.order.deleted"})},
		{"exact-created-eu", mustCompile(nil, Spec{Exact: map[string]string{"type": "com.example.order.created", "region": "eu-west-1"}})},
		{"all-created-us", mustCompile(nil, Spec{All: []Spec{{Exact: map[string]string{"type": "com.example.order.created"}}, {Prefix: map[string]string{"region": "us-"}}}})},
		{"prefix", mustCompile(nil, Spec{Prefix: map[string]string{"type": "com.example."}})},
		{"nil filter", nil},
	})
	got := x.Route(testEvent(), nil)
	want := []string{"all", "created", "exact-created-eu", "prefix", "nil filter"}
	if !slices.Equal(got, want) {
		t.Errorf("Route = %v, want %v", got, want)
	}
	if x.Len() != 7 {
		t.Errorf("Len = %d", x.Len())
	}
	if len(x.unindexed) != 3 || len(x.byType["com.example.order.created"]) != 3 {
		t.Errorf("indexed %v, unindexed %v", x.byType, x.unindexed)
	}
}

// randomSpec builds a random filter spec over a small vocabulary, so that matches are
// frequent enough to be tested.
func randomSpec(r *rand.Rand, depth int) Spec {
	types := []string{"t0", "t1", "t2", "t3"}
	names := []string{"type", "source", "subject", "ext1", "ext2"}
	values := []string{"t0", "t1", "t2", "s0", "s1", "v0", "v1"}
	attrs := func() map[string]string {
		m := map[string]string{}
		for n := 1 + r.IntN(2); n > 0; n-- {
			k := names[r.IntN(len(names))]
			if k == "type" {
				m[k] = types[r.IntN(len(types))]
			} else {
				m[k] = values[r.IntN(len(values))]
			}
		}
		return m
	}
	k := r.IntN(7)
	if depth > 2 {
		k = r.IntN(3)
	}
	switch k {
	case 0:
		return Spec{Exact: attrs()}
	case 1:
		return Spec{Prefix: map[string]string{names[r.IntN(len(names))]: values[r.IntN(len(values))][:1]}}
	case 2:
		return Spec{Suffix: attrs()}
	case 3:
		return Spec{All: []Spec{randomSpec(r, depth+1), randomSpec(r, depth+1)}}
	case 4:
		return Spec{Any: []Spec{randomSpec(r, depth+1), randomSpec(r, depth+1)}}
	case 5:
		s := randomSpec(r, depth+1)
		return Spec{Not: &s}
	default:
		return Spec{CESQL: fmt.Sprintf("type = '%s' OR ext1 = 'v%d'", types[r.IntN(len(types))], r.IntN(2))}
	}
}

func randomEvent(r *rand.Rand) *event.Event {
	e := &event.Event{SpecVersion: "1.0", ID: "x",
		Type:   fmt.Sprintf("t%d", r.IntN(5)),
		Source: fmt.Sprintf("s%d", r.IntN(2)),
	}
	if r.IntN(2) == 0 {
		e.Subject = fmt.Sprintf("v%d", r.IntN(2))
	}
	for _, n := range []string{"ext1", "ext2"} {
		if r.IntN(3) > 0 {
			e.Extensions = append(e.Extensions, event.Extension{Name: n, Value: fmt.Sprintf("v%d", r.IntN(2))})
		}
	}
	return e
}

func TestIndexMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		var entries []IndexEntry
		for i := r.IntN(40); i >= 0; i-- {
			var f Filter
			var err error
			if r.IntN(3) == 0 {
				attrs := map[string]string{"type": fmt.Sprintf("t%d", r.IntN(4))}
				if r.IntN(2) == 0 {
					attrs["ext1"] = []string{"", "v0", "v1"}[r.IntN(3)]
				}
				if r.IntN(4) == 0 {
					attrs["type"] = ""
				}
				f, err = Compile(attrs, nil)
			} else {
				specs := []Spec{randomSpec(r, 0)}
				if r.IntN(3) == 0 {
					specs = append(specs, randomSpec(r, 0))
				}
				f, err = Compile(nil, specs)
			}
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, IndexEntry{Name: fmt.Sprint("e", i), Filter: f})
		}
		x := NewIndex(entries)
		for n := 0; n < 50; n++ {
			e := randomEvent(r)
			var want []string
			for _, en := range entries {
				if en.Filter.Match(e) {
					want = append(want, en.Name)
				}
			}
			if got := x.Route(e, nil); !slices.Equal(got, want) {
				t.Fatalf("round %d event %v: Route = %v, brute force = %v", round, e, got, want)
			}
		}
	}
}

func TestIndexRouteDoesNotAllocate(t *testing.T) {
	x := NewIndex(typeEntries(100))
	e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "s", Type: "io.triggermesh.perf.drill.42"}
	dst := make([]string, 0, 8)
	if n := testing.AllocsPerRun(100, func() {
		if got := x.Route(e, dst[:0]); len(got) != 1 {
			t.Fatalf("Route = %v", got)
		}
	}); n != 0 {
		t.Errorf("Route allocates %v times per call", n)
	}
}

// typeEntries returns n triggers with distinct exact type filters.
func typeEntries(n int) []IndexEntry {
	entries := make([]IndexEntry, n)
	for i := range entries {
		f, err := Compile(map[string]string{"type": fmt.Sprint("io.triggermesh.perf.drill.", i)}, nil)
		if err != nil {
			panic(err)
		}
		entries[i] = IndexEntry{Name: fmt.Sprint("trigger-", i), Filter: f}
	}
	return entries
}

func BenchmarkRoute(b *testing.B) {
	e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "s", Type: "io.triggermesh.perf.drill.0"}
	for _, n := range []int{1, 100, 1000} {
		x := NewIndex(typeEntries(n))
		b.Run(fmt.Sprintf("triggers=%d", n), func(b *testing.B) {
			dst := make([]string, 0, 8)
			b.ReportAllocs()
			for b.Loop() {
				if got := x.Route(e, dst[:0]); len(got) != 1 {
					b.Fatalf("Route = %v", got)
				}
			}
		})
	}
	// Without the index: every filter evaluated, the cost Route avoids.
	b.Run("bruteforce/triggers=100", func(b *testing.B) {
		entries := typeEntries(100)
		dst := make([]string, 0, 8)
		b.ReportAllocs()
		for b.Loop() {
			dst = dst[:0]
			for _, en := range entries {
				if en.Filter.Match(e) {
					dst = append(dst, en.Name)
				}
			}
			if len(dst) != 1 {
				b.Fatal(dst)
			}
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	e := testEvent()
	for _, bc := range []struct {
		name    string
		attrs   map[string]string
		filters []Spec
	}{
		{"attributes", map[string]string{"type": "com.example.order.created", "region": "eu-west-1"}, nil},
		{"prefix+suffix", nil, []Spec{{Prefix: map[string]string{"type": "com.example."}}, {Suffix: map[string]string{"source": "/orders"}}}},
		{"cesql", nil, []Spec{{CESQL: "type = 'com.example.order.created' AND region LIKE 'eu-%'"}}},
	} {
		f, err := Compile(bc.attrs, bc.filters)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !f.Match(e) {
					b.Fatal("no match")
				}
			}
		})
	}
}
