package channel

import (
	"context"
	"errors"
)

// ErrNoStateStore is returned by StateStorer.StateStore when the channel, as
// configured, keeps no trigger flags (a kinesis channel without a lease table): the
// broker keeps them in its own memory.
var ErrNoStateStore = errors.New("the channel keeps no trigger flags as configured")

// TriggerFlags are the small per-trigger settings an operator changes through the API
// (POST /triggers/NS/NAME/pause), kept by a StateStore.
type TriggerFlags struct {
	// Paused is true while the operator API holds the trigger paused.
	Paused bool `json:"paused"`
}

// StateChange is one trigger's flags as a StateStore's Watch reports them. A change
// with an empty Trigger marks the end of the flags that were stored when Watch began:
// what follows it happened since.
type StateChange struct {
	Trigger string
	Flags   TriggerFlags
}

// StateStore keeps the TriggerFlags of one broker's triggers in the channel's backend:
// every replica of the broker sharing the backend reads and changes the same flags, and
// they outlive the processes. Implementations are safe for concurrent use.
type StateStore interface {
	// Get returns trigger's flags; the zero TriggerFlags when none were set.
	Get(ctx context.Context, trigger string) (TriggerFlags, error)
	// Set stores trigger's flags. On nil every replica's Watch reports them.
	Set(ctx context.Context, trigger string, f TriggerFlags) error
	// Watch reports the flags of every trigger that has some, then a StateChange with
	// an empty Trigger, then each change as it is stored (by this process or another)
	// until ctx ends or the backend fails; then it closes the channel it returned.
	Watch(ctx context.Context) (<-chan StateChange, error)
}

// StateStorer is implemented by durable channels that keep their broker's trigger flags
// in their backend (StateStore). A broker on a channel that does not implement it keeps
// them in its own memory, until it stops.
type StateStorer interface {
	// StateStore returns the store of the channel's broker, or an error wrapping
	// ErrNoStateStore when the channel as configured keeps none.
	StateStore(ctx context.Context) (StateStore, error)
}

// WatchedFlags returns trigger's flags as watch (a StateStore's Watch) reports them up to
// its empty StateChange: the Get of a store that can only read its log whole. synced is
// false when the watch ended before that (ctx ended, or the backend failed).
func WatchedFlags(ctx context.Context, watch func(context.Context) (<-chan StateChange, error), trigger string) (f TriggerFlags, synced bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch once synced
	w, err := watch(ctx)
	if err != nil {
		return TriggerFlags{}, false, err
	}
	for c := range w {
		if c.Trigger == "" {
			return f, true, nil
		}
		if c.Trigger == trigger {
			f = c.Flags
		}
	}
	return TriggerFlags{}, false, nil
}
