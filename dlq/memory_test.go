package dlq_test

import (
	"context"
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
