package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.StateStorer = (*Channel)(nil)

// Bounds of a broker's state bucket. A value is one trigger's name and flags; the
// bucket holds one key per trigger an operator ever paused or resumed.
const (
	stateMaxValue = 1 << 10 // a trigger's key is at most 63+1+253 bytes
	stateMaxBytes = 4 << 20
)

// StateStore returns the broker's trigger flags on JetStream (channel.StateStorer): a
// key-value bucket, sluice_state_<hash of the broker>, one key per trigger (a hash of
// its name), created when the store is opened, with the channel's replicas. Every
// replica on the same cluster watches the bucket.
func (c *Channel) StateStore(ctx context.Context) (channel.StateStore, error) {
	kv, err := c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       prefix + "_state_" + hashToken(c.brokerKey),
		Description:  "sluice trigger flags of broker " + c.brokerKey,
		MaxValueSize: stateMaxValue,
		MaxBytes:     stateMaxBytes,
		History:      1,
		Storage:      jetstream.FileStorage,
		Replicas:     c.cfg.replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: state bucket of broker %q: %w", c.brokerKey, unavailable(err))
	}
	return &stateStore{kv: kv, log: c.log}, nil
}

// stateStore is channel.StateStore on a key-value bucket.
type stateStore struct {
	kv  jetstream.KeyValue
	log *slog.Logger
}

// stateValue is what a key of the bucket holds.
type stateValue struct {
	Trigger string `json:"trigger"`
	channel.TriggerFlags
}

// decodeState reads a value of the state bucket; it was written by any process that
// reaches the bucket, so it is checked.
func decodeState(b []byte) (stateValue, error) {
	if len(b) > stateMaxValue {
		return stateValue{}, fmt.Errorf("state value of %d bytes: over the %d-byte bound", len(b), stateMaxValue)
	}
	var v stateValue
	if err := json.Unmarshal(b, &v); err != nil {
		return stateValue{}, fmt.Errorf("state value: %w", err)
	}
	if v.Trigger == "" {
		return stateValue{}, errors.New("state value: empty trigger")
	}
	return v, nil
}

func (s *stateStore) Get(ctx context.Context, trigger string) (channel.TriggerFlags, error) {
	e, err := s.kv.Get(ctx, hashToken(trigger))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return channel.TriggerFlags{}, nil
	}
	if err != nil {
		return channel.TriggerFlags{}, fmt.Errorf("jetstream: flags of trigger %s: %w", trigger, unavailable(err))
	}
	v, err := decodeState(e.Value())
	if err != nil {
		return channel.TriggerFlags{}, fmt.Errorf("jetstream: flags of trigger %s: %w", trigger, err)
	}
	return v.TriggerFlags, nil
}

func (s *stateStore) Set(ctx context.Context, trigger string, f channel.TriggerFlags) error {
	b, err := json.Marshal(stateValue{Trigger: trigger, TriggerFlags: f})
	if err != nil {
		return fmt.Errorf("jetstream: flags of trigger %s: %w", trigger, err)
	}
	if _, err := s.kv.Put(ctx, hashToken(trigger), b); err != nil {
		return fmt.Errorf("jetstream: storing the flags of trigger %s: %w", trigger, unavailable(err))
	}
	return nil
}

func (s *stateStore) Watch(ctx context.Context) (<-chan channel.StateChange, error) {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: watching the state bucket: %w", unavailable(err))
	}
	out := make(chan channel.StateChange)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-ctx.Done():
				return
			case got, ok := <-w.Updates():
				if !ok {
					return
				}
				e = got
			}
			var c channel.StateChange
			if e != nil { // nil: the initial values are all sent
				if e.Operation() != jetstream.KeyValuePut {
					continue // nobody deletes a key; flags are reset by a Put
				}
				v, err := decodeState(e.Value())
				if err == nil && hashToken(v.Trigger) != e.Key() {
					err = fmt.Errorf("state value of trigger %q under key %s, not its own", v.Trigger, e.Key())
				}
				if err != nil {
					s.log.Warn("ignoring a value of the state bucket that sluice did not write", "key", e.Key(), "err", err)
					continue
				}
				c = channel.StateChange{Trigger: v.Trigger, Flags: v.TriggerFlags}
			}
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
