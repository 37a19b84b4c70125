package dlq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
)

func TestMemory(t *testing.T) {
	dlqtest.Run(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		m, err := dlq.NewMemory(lim)
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		lim  dlq.Limits
		want string
	}{
		{dlq.Limits{MaxEntries: 0, MaxBytes: 1, MaxAge: time.Hour}, "--dlq-max-entries 0: want at least 1"},
		{dlq.Limits{MaxEntries: 1, MaxBytes: 0, MaxAge: time.Hour}, "--dlq-max-bytes 0: want at least 1"},
		{dlq.Limits{MaxEntries: 1, MaxBytes: 1, MaxAge: 0}, "--dlq-max-age 0s: want at least 1s"},
	} {
		if _, err := dlq.NewMemory(tc.lim); err == nil || err.Error() != tc.want {
			t.Errorf("NewMemory(%+v): %v; want %q", tc.lim, err, tc.want)
		}
	}
	if err := dlq.DefaultLimits().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestTrimReason(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"short", 5},
		{string(make([]byte, 5000)), dlq.MaxReason},
		{string(make([]byte, dlq.MaxReason-1)) + "é", dlq.MaxReason - 1}, // the rune would be cut: dropped
	} {
		if got := dlq.TrimReason(tc.in); len(got) != tc.want {
			t.Errorf("TrimReason(%d bytes) is %d bytes; want %d", len(tc.in), len(got), tc.want)
		}
	}
}

func TestMemoryPage(t *testing.T) {
	ctx := context.Background()
	m, _ := dlq.NewMemory(dlq.DefaultLimits())
	for i := range dlq.MaxPage + 10 {
		_, _ = m.Put(ctx, "ns/a", dlqtest.Entry(string(rune('a'+i%26)), 1))
	}
	for _, tc := range []struct{ ask, want int }{{0, 100}, {5, 5}, {5000, dlq.MaxPage}} {
		p, _ := m.List(ctx, "ns/a", 0, tc.ask)
		if len(p.Entries) != tc.want {
			t.Errorf("List(limit %d) gave %d; want %d", tc.ask, len(p.Entries), tc.want)
		}
	}
}

// TestMemoryTotal: the store's bytes, all triggers together, stay within WithTotalBytes:
// the oldest entry of any trigger goes first, counted by its trigger's next Put.
func TestMemoryTotal(t *testing.T) {
	ctx := context.Background()
	size := func() int64 { e := dlqtest.Entry("a", 1000); return e.Size() }()
	for _, tc := range []struct {
		name    string
		total   int64
		puts    []string // triggers, one Put each, in order
		want    map[string]string
		evicted int // counted by the last Put
		wantErr string
	}{
		{name: "room for all", total: 10 * size, puts: []string{"a", "b", "c"},
			want: map[string]string{"ns/a": "0", "ns/b": "1", "ns/c": "2"}},
		{name: "the oldest of another trigger goes", total: 2 * size, puts: []string{"a", "b", "c"},
			want: map[string]string{"ns/a": "", "ns/b": "1", "ns/c": "2"}},
		{name: "the oldest of its own trigger goes", total: 2 * size, puts: []string{"a", "a", "a"},
			want: map[string]string{"ns/a": "1,2"}, evicted: 1},
		{name: "another's eviction counted by its next Put", total: 2 * size, puts: []string{"a", "b", "c", "a"},
			want: map[string]string{"ns/a": "3", "ns/b": "", "ns/c": "2"}, evicted: 1},
		{name: "larger than the total", total: size - 1, puts: []string{"a"},
			wantErr: "larger than --dlq-memory-limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := dlq.NewMemory(dlq.DefaultLimits(), dlq.WithTotalBytes(tc.total))
			if err != nil {
				t.Fatal(err)
			}
			var n int
			for i, tr := range tc.puts {
				n, err = m.Put(ctx, "ns/"+tr, dlqtest.Entry(fmt.Sprint(i), 1000))
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Put: %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || n != tc.evicted {
				t.Errorf("last Put: %d evicted, %v; want %d", n, err, tc.evicted)
			}
			var bytes int64
			for tr, want := range tc.want {
				p, _ := m.List(ctx, tr, 0, 10)
				var got []string
				for _, e := range p.Entries {
					got = append(got, e.Event.ID)
				}
				if strings.Join(got, ",") != want {
					t.Errorf("%s holds %v; want %s", tr, got, want)
				}
				bytes += p.Bytes
			}
			if bytes > tc.total {
				t.Errorf("the store holds %d bytes; want at most %d", bytes, tc.total)
			}
		})
	}
	if _, err := dlq.NewMemory(dlq.DefaultLimits(), dlq.WithTotalBytes(0)); err == nil || err.Error() != "--dlq-memory-limit 0: want at least 1" {
		t.Errorf("WithTotalBytes(0): %v", err)
	}
}
