package kinesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-broker/sluice/channel"
)

// With a lease table, the catch-up of a subscription started in the past is an item of
// the table: group "<stream>#start", shard the subscription, from and until RFC 3339
// times (keep_routed and awaits_routing as in startMark). Every replica reads it when it opens the subscription. Remove moves it, with
// the checkpoints of the leases it deletes, into an item of group "<stream>#removed"
// (shard the subscription, checkpoint its JSON), kept for the stream's retention, from
// which a subscription re-created with the name resumes.
const (
	startGroupSuffix   = "#start"
	removedGroupSuffix = "#removed"
	attrFrom           = "from"
	attrUntil          = "until"
	attrKeepRouted     = "keep_routed"
	attrAwaitsRouting  = "awaits_routing"
	attrCheckpoint     = "checkpoint"
	// startTimeout bounds the lease table calls of ConsumeFrom.
	startTimeout = 10 * time.Second
)

// leasedStart returns the catch-up of the subscription called name (nil when it has
// none) and, for one re-created after Remove, the removed one's checkpoint to seed its
// leases. A subscription with leases resumes from them. One without: re-created (a
// removed record is in the table) at latest, it resumes from the removed checkpoint with
// a catch-up from its removal; otherwise it starts at from. The catch-up item is written
// before any lease, so that a replica killed in between goes on with it.
func (c *Channel) leasedStart(ctx context.Context, name string, from channel.StartFrom) (*startMark, *checkpoint, error) {
	t, group := c.leases, c.stream+startGroupSuffix
	ls, err := t.list(ctx, leaseGroup(c.stream, name))
	if err != nil {
		return nil, nil, err
	}
	mark, err := t.getStart(ctx, group, name)
	if err != nil || len(ls) > 0 {
		return mark, nil, err
	}
	rem, err := c.getRemoved(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if rem != nil && mark == nil && !from.Latest() {
		// Re-created with a start of its own: the removed one's position goes.
		if err := c.deleteRemoved(ctx, name); err != nil {
			return nil, nil, err
		}
		rem = nil
	}
	if mark != nil {
		return mark, rem, nil
	}
	now := time.Now()
	switch {
	case rem != nil:
		mark = &startMark{From: rem.Removed.Add(-startMargin), Until: now.Add(startMargin), KeepRouted: true, AwaitsRouting: from.Routed != nil}
		if rem.Start != nil {
			mark.From, mark.KeepRouted = rem.Start.From, rem.Start.KeepRouted
		}
	case from.Latest():
		return nil, nil, nil
	default:
		mark = &startMark{From: from.Time, Until: now.Add(startMargin), AwaitsRouting: from.Routed != nil}
	}
	item := t.key(group, name)
	item[attrUntil] = &types.AttributeValueMemberS{Value: mark.Until.UTC().Format(time.RFC3339Nano)}
	if !mark.From.IsZero() {
		item[attrFrom] = &types.AttributeValueMemberS{Value: mark.From.UTC().Format(time.RFC3339Nano)}
	}
	if mark.KeepRouted {
		item[attrKeepRouted] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if mark.AwaitsRouting {
		item[attrAwaitsRouting] = &types.AttributeValueMemberBOOL{Value: true}
	}
	_, err = t.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(t.name), Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#s)"),
		ExpressionAttributeNames: map[string]string{"#s": attrShard},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		mark, err = t.getStart(ctx, group, name) // another replica started it first
		return mark, rem, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kinesis: storing the start of subscription %s: %w", name, err)
	}
	c.cfg.logger.Info("kinesis: subscription catching up with the events stored before it existed",
		"subscription", name, "stream", c.stream, "from", startName(from), "since", mark.From, "until", mark.Until, "recreated", rem != nil, "awaits_routing", mark.AwaitsRouting)
	return mark, rem, nil
}

// keepRemoved records, before Remove deletes the leases ls of the subscription called
// name, their checkpoints (without the settled records past each, which a re-created
// subscription delivers again) and its catch-up in an item of group "<stream>#removed",
// and deletes its catch-up item.
func (c *Channel) keepRemoved(ctx context.Context, name string, ls []lease) error {
	t := c.leases
	start, err := t.getStart(ctx, c.stream+startGroupSuffix, name)
	if err != nil {
		return err
	}
	cp := checkpoint{Subscription: name, Shards: map[string]shardCheck{}, Removed: time.Now(), Start: start}
	for _, l := range ls {
		cp.Shards[l.shard] = shardCheck{Seq: l.check.Seq, Done: l.check.Done}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	item := t.key(c.stream+removedGroupSuffix, name)
	item[attrCheckpoint] = &types.AttributeValueMemberS{Value: string(b)}
	if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(t.name), Item: item}); err != nil {
		return fmt.Errorf("kinesis: keeping the position of removed subscription %s: %w", name, err)
	}
	if _, err := t.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(t.name), Key: t.key(c.stream+startGroupSuffix, name)}); err != nil {
		return fmt.Errorf("kinesis: deleting the start of subscription %s: %w", name, err)
	}
	return nil
}

// getRemoved reads the removed record of the subscription called name; nil if none.
func (c *Channel) getRemoved(ctx context.Context, name string) (*checkpoint, error) {
	t := c.leases
	out, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.name), Key: t.key(c.stream+removedGroupSuffix, name), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("kinesis: reading the position of removed subscription %s: %w", name, err)
	}
	v, ok := out.Item[attrCheckpoint].(*types.AttributeValueMemberS)
	if !ok {
		return nil, nil
	}
	var cp checkpoint
	if err := json.Unmarshal([]byte(v.Value), &cp); err != nil {
		return nil, fmt.Errorf("kinesis: lease table %s, removed subscription %s: %w", t.name, name, err)
	}
	if cp.Shards == nil {
		cp.Shards = map[string]shardCheck{}
	}
	return &cp, nil
}

// deleteRemoved deletes the removed record of the subscription called name.
func (c *Channel) deleteRemoved(ctx context.Context, name string) error {
	t := c.leases
	if _, err := t.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(t.name), Key: t.key(c.stream+removedGroupSuffix, name)}); err != nil {
		return fmt.Errorf("kinesis: deleting the position of removed subscription %s: %w", name, err)
	}
	return nil
}

// sweepRemovedLeased deletes the removed records older than the stream's retention
// (at most maxSweep read); failures are logged and tried again at the next Remove.
func (c *Channel) sweepRemovedLeased(ctx context.Context) {
	ret, err := c.Retention(ctx)
	if err != nil {
		c.log.Warn("sweep", "kinesis: cannot read the stream's retention; removed positions kept for now", "stream", c.stream, "err", err)
		return
	}
	t, group := c.leases, c.stream+removedGroupSuffix
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(t.name),
		KeyConditionExpression:    aws.String("#g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberS{Value: group}},
		ConsistentRead:            aws.Bool(true),
	}
	for read := 0; read < maxSweep; {
		res, err := t.api.Query(ctx, in)
		if err != nil {
			c.log.Warn("sweep", "kinesis: cannot read removed positions", "stream", c.stream, "err", err)
			return
		}
		for _, item := range res.Items {
			read++
			v, _ := item[attrCheckpoint].(*types.AttributeValueMemberS)
			sub, _ := item[attrShard].(*types.AttributeValueMemberS)
			var cp checkpoint
			if v == nil || sub == nil || json.Unmarshal([]byte(v.Value), &cp) != nil || time.Since(cp.Removed) <= ret {
				continue
			}
			if err := c.deleteRemoved(ctx, sub.Value); err != nil {
				c.log.Warn("sweep", "kinesis: cannot delete a removed position", "stream", c.stream, "err", err)
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			return
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// getStart reads the catch-up item of sub; nil when there is none.
func (t *leaseTable) getStart(ctx context.Context, group, sub string) (*startMark, error) {
	out, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.name), Key: t.key(group, sub), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("kinesis: reading the start of subscription %s: %w", sub, err)
	}
	if out.Item == nil {
		return nil, nil
	}
	var m startMark
	if v, ok := out.Item[attrKeepRouted].(*types.AttributeValueMemberBOOL); ok {
		m.KeepRouted = v.Value
	}
	if v, ok := out.Item[attrAwaitsRouting].(*types.AttributeValueMemberBOOL); ok {
		m.AwaitsRouting = v.Value
	}
	for attr, dst := range map[string]*time.Time{attrFrom: &m.From, attrUntil: &m.Until} {
		v, ok := out.Item[attr].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		if *dst, err = time.Parse(time.RFC3339Nano, v.Value); err != nil {
			return nil, fmt.Errorf("kinesis: lease table %s, start of subscription %s: %s: %w", t.name, sub, attr, err)
		}
	}
	return &m, nil
}

// extendLeased moves the end of k's catch-up to until, if later, in its lease table item
// (extendStart), and takes the item's catch-up: another replica may have moved it further.
func (k *consumer) extendLeased(until time.Time) error {
	ctx, cancel := context.WithTimeout(k.ctx, startTimeout)
	defer cancel()
	m, err := k.ch.extendStart(ctx, k.name, until)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if m == nil { // no item: the subscription was removed meanwhile; nothing to record
		own := *k.start
		own.Until, own.AwaitsRouting = later(own.Until, until), false
		m = &own
	}
	k.start = m
	return nil
}

// extendStart moves the until of the catch-up item of the subscription called name to
// until if later and clears its awaits_routing (conditioned on the until it read: a
// change by another replica is read again), returning the item's catch-up; nil when
// there is no item.
func (c *Channel) extendStart(ctx context.Context, name string, until time.Time) (*startMark, error) {
	t, group := c.leases, c.stream+startGroupSuffix
	for {
		m, err := t.getStart(ctx, group, name)
		if err != nil || m == nil {
			return m, err
		}
		if !m.AwaitsRouting && !until.After(m.Until) {
			return m, nil
		}
		old := m.Until.UTC().Format(time.RFC3339Nano)
		m.Until, m.AwaitsRouting = later(m.Until, until), false
		_, err = t.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(t.name), Key: t.key(group, name),
			UpdateExpression:         aws.String("SET #u = :u REMOVE #a"),
			ConditionExpression:      aws.String("#u = :old"),
			ExpressionAttributeNames: map[string]string{"#u": attrUntil, "#a": attrAwaitsRouting},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":u":   &types.AttributeValueMemberS{Value: m.Until.UTC().Format(time.RFC3339Nano)},
				":old": &types.AttributeValueMemberS{Value: old},
			},
		})
		var failed *types.ConditionalCheckFailedException
		if errors.As(err, &failed) {
			continue // moved or deleted meanwhile: read it again
		}
		if err != nil {
			return nil, fmt.Errorf("kinesis: recording where the catch-up of subscription %s ends: %w", name, err)
		}
		return m, nil
	}
}
