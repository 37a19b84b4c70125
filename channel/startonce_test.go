package channel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestStartOnce: a failed start is run again at the next Do; once one succeeded no Do
// runs it again; callers at once run it one at a time, and only until it succeeded.
func TestStartOnce(t *testing.T) {
	var o StartOnce
	var runs atomic.Int32
	fail := errors.New("not yet")
	start := func(ok bool) func(context.Context) error {
		return func(context.Context) error {
			runs.Add(1)
			if !ok {
				return fail
			}
			return nil
		}
	}
	ctx := context.Background()
	if err := o.Do(ctx, start(false)); !errors.Is(err, fail) {
		t.Fatalf("a failing start: %v", err)
	}
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := o.Do(ctx, func(ctx context.Context) error {
				if inside.Add(1) > 1 {
					t.Error("two starts ran at once")
				}
				defer inside.Add(-1)
				return start(true)(ctx)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := o.Do(ctx, start(false)); err != nil {
		t.Fatalf("after a success: %v", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("start ran %d times; want 2 (the failure, then one success)", n)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var fresh StartOnce
	fresh.sem = make(chan struct{}, 1)
	fresh.sem <- struct{}{} // another caller's start runs
	if err := fresh.Do(cancelled, start(true)); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting with an ended context: %v", err)
	}
}
