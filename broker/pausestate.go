package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/internal/ratelog"
)

// How a broker follows the pauses its channel's StateStore keeps.
const (
	// pauseSyncTimeout bounds how long a new broker waits for the stored pauses before it
	// starts its triggers; past it they start as their annotations say, and are paused
	// when the store answers.
	pauseSyncTimeout = 10 * time.Second
	// pauseRetry is the wait before the store is opened or watched again after a failure.
	pauseRetry = time.Second
	// pauseStoreTimeout bounds one pause or resume written to the store: the answer
	// comes before the CLI's own 10-second timeout.
	pauseStoreTimeout = 5 * time.Second
)

// Where a trigger's pause comes from, in TriggerState.PausedBy.
const (
	pausedByAnnotation = "annotation" // sluice.dev/paused: "true"
	pausedByAPI        = "api"        // POST /triggers/NS/NAME/pause
)

// errPauseStore is the answer to a pause or resume while the channel's state store is
// not open.
var errPauseStore = errors.New("the channel's state store is not open yet")

// pauseState is what a broker knows of its triggers' API pauses. Its fields but stop
// and done are guarded by Broker.mu.
type pauseState struct {
	shared bool               // the channel keeps the pauses (channel.StateStorer)
	store  channel.StateStore // the channel's store, once open; nil on a memory channel
	api    map[string]bool    // trigger -> paused through the API (as stored, if shared)
	stop   context.CancelFunc // ends the watch
	done   chan struct{}      // closed when the watch has returned
}

// openPauses starts following the channel's stored pauses, if it keeps them, and waits
// up to pauseSyncTimeout for those already stored: a replica that restarts starts its
// triggers paused as the others hold them.
func (b *Broker) openPauses(life context.Context) {
	b.ps.api = map[string]bool{}
	ss, ok := b.ch.(channel.StateStorer)
	if !ok {
		return
	}
	b.ps.shared = true
	ctx, stop := context.WithCancel(life)
	synced := make(chan struct{})
	b.ps.stop, b.ps.done = stop, make(chan struct{})
	go func() {
		defer close(b.ps.done)
		b.watchPauses(ctx, ss, synced)
	}()
	t := time.NewTimer(pauseSyncTimeout)
	defer t.Stop()
	select {
	case <-synced:
	case <-t.C:
		b.log.Error("the pauses stored in the channel are not known yet: triggers start as their annotations say until they are", "broker", b.key)
	case <-ctx.Done():
	}
}

// stopPauses ends the watch of the stored pauses and waits for it.
func (b *Broker) stopPauses() {
	if b.ps.stop != nil {
		b.ps.stop()
		<-b.ps.done
	}
}

// watchPauses applies every pause the store reports until ctx ends, opening and
// watching it again pauseRetry after each failure. It closes synced once it has
// applied the pauses stored when it first watched.
func (b *Broker) watchPauses(ctx context.Context, ss channel.StateStorer, synced chan struct{}) {
	warn := ratelog.New(b.log.With("broker", b.key))
	defer warn.Close()
	for {
		err := b.watchPausesOnce(ctx, ss, synced)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, channel.ErrNoStateStore) { // pauses stay in this process
			b.mu.Lock()
			b.ps.shared = false
			b.mu.Unlock()
			close(synced)
			return
		}
		warn.Warn("pausewatch", "the pauses stored in the channel cannot be followed now; trying again", "err", err)
		t := time.NewTimer(pauseRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchPausesOnce opens the store if it is not open, and applies what its watch
// reports until the watch ends.
func (b *Broker) watchPausesOnce(ctx context.Context, ss channel.StateStorer, synced chan struct{}) error {
	b.mu.Lock()
	st := b.ps.store
	b.mu.Unlock()
	if st == nil {
		var err error
		if st, err = ss.StateStore(ctx); err != nil {
			return err
		}
		b.mu.Lock()
		b.ps.store = st
		b.mu.Unlock()
	}
	changes, err := st.Watch(ctx)
	if err != nil {
		return err
	}
	initial, seen := true, map[string]bool{}
	for c := range changes {
		if c.Trigger != "" {
			if initial {
				seen[c.Trigger] = true
			}
			b.applyAPIPause(c.Trigger, c.Flags.Paused)
			continue
		}
		if !initial {
			continue
		}
		initial = false
		// What the store no longer holds is not paused (after a watch that failed).
		b.mu.Lock()
		var gone []string
		for k := range b.ps.api {
			if !seen[k] {
				gone = append(gone, k)
			}
		}
		b.mu.Unlock()
		for _, k := range gone {
			b.applyAPIPause(k, false)
		}
		select {
		case <-synced:
		default:
			close(synced)
		}
	}
	return errors.New("the watch of the channel's state store ended")
}

// applyAPIPause records trigger's API pause and pauses or resumes it if it runs here:
// it is paused while its annotation or the API says so.
func (b *Broker) applyAPIPause(trigger string, paused bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if paused {
		b.ps.api[trigger] = true
	} else {
		delete(b.ps.api, trigger)
	}
	if t := b.triggers[trigger]; t != nil {
		setPaused(t.dispatcher, t.cfg.Paused || paused)
	}
}

// apiPaused reports whether trigger is paused through the API. Called with b.mu held.
func (b *Broker) apiPaused(trigger string) bool { return b.ps.api[trigger] }

// forgetPause drops the API pause of a removed trigger when it is held in memory; a
// store keeps it (another replica may still run the trigger). Called with b.mu held.
func (b *Broker) forgetPause(trigger string) {
	if !b.ps.shared {
		delete(b.ps.api, trigger)
	}
}

// pauseByAPI pauses (paused true) or resumes trigger through the operator API: in the
// channel's store when it keeps the pauses, so that every replica applies it, else in
// this process. A resume clears the API's pause only: a trigger whose annotation says
// paused stays paused.
func (b *Broker) pauseByAPI(ctx context.Context, trigger string, paused bool) error {
	b.mu.Lock()
	shared, st := b.ps.shared, b.ps.store
	b.mu.Unlock()
	if shared {
		if st == nil {
			return errPauseStore
		}
		ctx, cancel := context.WithTimeout(ctx, pauseStoreTimeout)
		defer cancel()
		if err := st.Set(ctx, trigger, channel.TriggerFlags{Paused: paused}); err != nil {
			return fmt.Errorf("storing the pause: %w", err)
		}
	}
	b.applyAPIPause(trigger, paused) // at once here; the other replicas as they watch
	return nil
}

// triggerState is the answer of the TriggersPath endpoints for trigger t of b.
func (b *Broker) triggerState(t *trigger) TriggerState {
	b.mu.Lock()
	var by []string
	if t.cfg.Paused {
		by = append(by, pausedByAnnotation)
	}
	if b.ps.api[t.key] {
		by = append(by, pausedByAPI)
	}
	b.mu.Unlock()
	return TriggerState{Trigger: t.key, Paused: t.dispatcher.Paused(), PausedBy: by}
}

// findTriggerBroker returns the broker running the trigger or subscription key
// ("namespace/name") and the trigger, or nils.
func (s *Server) findTriggerBroker(key string) (*Broker, *trigger) {
	for _, b := range s.snapshot() {
		b.mu.Lock()
		t := b.triggers[key]
		b.mu.Unlock()
		if t != nil {
			return b, t
		}
	}
	return nil, nil
}

// stopTrigger stops t at shutdown and returns how many messages it left (trigger.stop).
// On a durable channel a paused trigger is not resumed to drain: it stops at once,
// releasing what it holds, and its events stay stored for the replicas still running
// and for after a restart. Any other trigger drains until ctx ends.
func (b *Broker) stopTrigger(ctx context.Context, t *trigger) int {
	if !b.durable || !t.dispatcher.Paused() {
		return t.stop(ctx)
	}
	t.cancel()
	<-t.done
	return t.consumer.Len()
}
