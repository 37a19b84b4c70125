package kinesis

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.StateStorer = (*Channel)(nil)

// The trigger flags of a broker are items of the lease table: group "<stream>#state"
// (lease groups are "<stream>/<subscription>", and stream names have no '#'), shard the
// trigger, paused a boolean.
const (
	stateGroupSuffix = "#state"
	attrPaused       = "paused"
	// statePoll is how often a watch reads the flags again.
	statePoll = time.Second
)

// StateStore returns the broker's trigger flags in the lease table
// (channel.StateStorer): one item per trigger, read again every second by every
// replica's watch. Without a lease table it returns channel.ErrNoStateStore.
func (c *Channel) StateStore(context.Context) (channel.StateStore, error) {
	if c.leases == nil {
		return nil, fmt.Errorf("kinesis without --kinesis-lease-table: %w", channel.ErrNoStateStore)
	}
	return &stateStore{t: c.leases, group: c.stream + stateGroupSuffix}, nil
}

// stateStore is channel.StateStore in the lease table.
type stateStore struct {
	t     *leaseTable
	group string
}

func (s *stateStore) Set(ctx context.Context, trigger string, f channel.TriggerFlags) error {
	item := s.t.key(s.group, trigger)
	item[attrPaused] = &types.AttributeValueMemberBOOL{Value: f.Paused}
	if _, err := s.t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.name), Item: item}); err != nil {
		return fmt.Errorf("kinesis: storing the flags of trigger %s: %w: %w", trigger, channel.ErrUnavailable, err)
	}
	return nil
}

func (s *stateStore) Get(ctx context.Context, trigger string) (channel.TriggerFlags, error) {
	out, err := s.t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.t.name), Key: s.t.key(s.group, trigger), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return channel.TriggerFlags{}, fmt.Errorf("kinesis: flags of trigger %s: %w: %w", trigger, channel.ErrUnavailable, err)
	}
	p, _ := out.Item[attrPaused].(*types.AttributeValueMemberBOOL)
	return channel.TriggerFlags{Paused: p != nil && p.Value}, nil
}

// all reads every trigger's flags.
func (s *stateStore) all(ctx context.Context) (map[string]channel.TriggerFlags, error) {
	ls, err := s.t.list(ctx, s.group)
	if err != nil {
		return nil, err
	}
	out := make(map[string]channel.TriggerFlags, len(ls))
	for _, l := range ls {
		out[l.shard] = channel.TriggerFlags{Paused: l.paused}
	}
	return out, nil
}

// Watch reads the flags every statePoll and reports those that changed; it ends at the
// first read that fails.
func (s *stateStore) Watch(ctx context.Context) (<-chan channel.StateChange, error) {
	seen, err := s.all(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", channel.ErrUnavailable, err)
	}
	out := make(chan channel.StateChange)
	go func() {
		defer close(out)
		send := func(c channel.StateChange) bool {
			select {
			case out <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for tr, f := range seen {
			if !send(channel.StateChange{Trigger: tr, Flags: f}) {
				return
			}
		}
		if !send(channel.StateChange{}) {
			return
		}
		tick := time.NewTicker(statePoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now, err := s.all(ctx)
			if err != nil {
				return
			}
			for tr, f := range now {
				if old, ok := seen[tr]; (!ok || old != f) && !send(channel.StateChange{Trigger: tr, Flags: f}) {
					return
				}
			}
			for tr := range seen {
				if _, ok := now[tr]; !ok && !send(channel.StateChange{Trigger: tr}) {
					return
				}
			}
			seen = now
		}
	}()
	return out, nil
}
