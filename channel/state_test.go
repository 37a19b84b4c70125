package channel

import (
	"context"
	"errors"
	"testing"
)

// TestWatchedFlags: a trigger's flags are the last its store's watch reports before the
// sync mark; a watch that ends before it, or fails to start, gives none.
func TestWatchedFlags(t *testing.T) {
	paused := TriggerFlags{Paused: true}
	boom := errors.New("boom")
	tests := []struct {
		name       string
		changes    []StateChange
		err        error
		want       TriggerFlags
		wantSynced bool
	}{
		{"last before the mark", []StateChange{{"ns/a", paused}, {"ns/b", paused}, {"ns/a", TriggerFlags{}}, {"", TriggerFlags{}}, {"ns/a", paused}}, nil, TriggerFlags{}, true},
		{"set", []StateChange{{"ns/b", TriggerFlags{}}, {"ns/a", paused}, {"", TriggerFlags{}}}, nil, paused, true},
		{"none", []StateChange{{"", TriggerFlags{}}}, nil, TriggerFlags{}, true},
		{"ended before the mark", []StateChange{{"ns/a", paused}}, nil, TriggerFlags{}, false},
		{"watch failed", nil, boom, TriggerFlags{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			watch := func(context.Context) (<-chan StateChange, error) {
				if tt.err != nil {
					return nil, tt.err
				}
				ch := make(chan StateChange, len(tt.changes))
				for _, c := range tt.changes {
					ch <- c
				}
				close(ch)
				return ch, nil
			}
			f, synced, err := WatchedFlags(context.Background(), watch, "ns/a")
			if !errors.Is(err, tt.err) || f != tt.want || synced != tt.wantSynced {
				t.Fatalf("got %+v, synced %v, %v; want %+v, synced %v, %v", f, synced, err, tt.want, tt.wantSynced, tt.err)
			}
		})
	}
}
