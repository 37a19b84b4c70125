package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.StateStorer = (*Channel)(nil)

// stateMaxValue bounds one record of the state topic: a trigger's flags.
const stateMaxValue = 1 << 10

// StateTopic is the compacted topic that keeps the trigger flags of the broker whose
// topic is topic: "<topic>.state", cut to Kafka's 249 characters.
func StateTopic(topic string) string {
	name := topic + ".state"
	if len(name) > 249 {
		name = name[len(name)-249:]
	}
	return name
}

// StateStore returns the broker's trigger flags on Kafka (channel.StateStorer): a
// compacted topic of one partition, StateTopic, keyed by trigger, created when the
// store is opened with the channel's replication factor. Every replica reads it from
// its start.
func (c *Channel) StateStore(ctx context.Context) (channel.StateStore, error) {
	s := &stateStore{c: c, topic: StateTopic(c.topic)}
	rf := c.cfg.replication
	if rf == 0 {
		rf = -1
	}
	cfg := c.cfg.topicConfigs(rf)
	if cfg == nil {
		cfg = map[string]*string{}
	}
	compact := "compact"
	cfg["cleanup.policy"] = &compact
	if _, err := c.adm.CreateTopic(ctx, 1, rf, cfg, s.topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("kafka: state topic %s: %w", s.topic, unavailableErr(err))
	}
	return s, nil
}

// unavailableErr wraps err in channel.ErrUnavailable.
func unavailableErr(err error) error { return fmt.Errorf("%w: %w", channel.ErrUnavailable, err) }

// stateStore is channel.StateStore on a compacted topic.
type stateStore struct {
	c     *Channel
	topic string
}

// decodeState reads a record of the state topic (written by any client that reaches
// the topic, so it is checked): its key is the trigger, its value the flags.
func decodeState(key, value []byte) (channel.StateChange, error) {
	if len(key) == 0 || len(key)+len(value) > stateMaxValue {
		return channel.StateChange{}, fmt.Errorf("state record of %d+%d bytes: want a trigger and at most %d bytes", len(key), len(value), stateMaxValue)
	}
	var f channel.TriggerFlags
	if err := json.Unmarshal(value, &f); err != nil {
		return channel.StateChange{}, fmt.Errorf("state record: %w", err)
	}
	return channel.StateChange{Trigger: string(key), Flags: f}, nil
}

func (s *stateStore) Set(ctx context.Context, trigger string, f channel.TriggerFlags) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("kafka: flags of trigger %s: %w", trigger, err)
	}
	if err := s.c.cl.ProduceSync(ctx, &kgo.Record{Topic: s.topic, Key: []byte(trigger), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("kafka: storing the flags of trigger %s: %w", trigger, unavailableErr(err))
	}
	return nil
}

// Get reads the topic to its end: a store's flags are few.
func (s *stateStore) Get(ctx context.Context, trigger string) (channel.TriggerFlags, error) {
	f, synced, err := channel.WatchedFlags(ctx, s.Watch, trigger)
	if err != nil || synced {
		return f, err
	}
	return channel.TriggerFlags{}, fmt.Errorf("kafka: flags of trigger %s: %w", trigger, unavailableErr(errors.Join(ctx.Err(), errors.New("the state topic could not be read"))))
}

func (s *stateStore) Watch(ctx context.Context) (<-chan channel.StateChange, error) {
	ends, err := s.c.adm.ListEndOffsets(ctx, s.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: state topic %s: %w", s.topic, unavailableErr(err))
	}
	end := int64(0)
	if o, ok := ends.Lookup(s.topic, 0); ok {
		end = o.Offset
	}
	cl, err := kgo.NewClient(s.c.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxPartitionBytes(1<<20),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: state topic %s: %w", s.topic, err)
	}
	out := make(chan channel.StateChange)
	go func() {
		defer close(out)
		defer cl.Close()
		send := func(c channel.StateChange) bool {
			select {
			case out <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		synced := end == 0
		if synced && !send(channel.StateChange{}) {
			return
		}
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					s.c.log.Warn("state", "kafka: reading the state topic", "topic", t, "err", err)
				}
			})
			for it := fs.RecordIter(); !it.Done(); {
				r := it.Next()
				c, err := decodeState(r.Key, r.Value)
				if err != nil {
					s.c.log.Warn("state", "kafka: ignoring a record of the state topic that sluice did not write", "topic", s.topic, "offset", r.Offset, "err", err)
				} else if !send(c) {
					return
				}
				if !synced && r.Offset+1 >= end {
					synced = true
					if !send(channel.StateChange{}) {
						return
					}
				}
			}
		}
	}()
	return out, nil
}
