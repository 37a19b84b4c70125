package channel

import (
	"context"
	"sync"
	"sync/atomic"
)

// StartOnce runs a start that must succeed once, such as a store declaring its log and
// starting its reader: Do runs start until one run succeeds, one run at a time; a caller
// that comes while one runs waits for it (or for its own ctx), and every call after the
// success returns nil at once. The zero value is ready to use.
type StartOnce struct {
	mu      sync.Mutex
	sem     chan struct{} // one start at a time; made at the first Do
	started atomic.Bool
}

// Do runs start unless a run of it succeeded already; it returns start's error, or
// ctx's while it waits for another caller's run.
func (o *StartOnce) Do(ctx context.Context, start func(context.Context) error) error {
	if o.started.Load() {
		return nil
	}
	o.mu.Lock()
	if o.sem == nil {
		o.sem = make(chan struct{}, 1)
	}
	sem := o.sem
	o.mu.Unlock()
	select {
	case sem <- struct{}{}:
		defer func() { <-sem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if o.started.Load() { // the run waited for succeeded
		return nil
	}
	if err := start(ctx); err != nil {
		return err
	}
	o.started.Store(true)
	return nil
}
