package kinesis

import (
	"context"
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
// times. Every replica reads it when it opens the subscription; Remove deletes it with
// the subscription's leases.
const (
	startGroupSuffix = "#start"
	attrFrom         = "from"
	attrUntil        = "until"
	// startTimeout bounds the lease table calls of ConsumeFrom.
	startTimeout = 10 * time.Second
)

// leasedStart returns the catch-up of the subscription called name, creating it when
// the subscription is new (no catch-up, no lease) and from is not latest; nil when it
// has none.
func (c *Channel) leasedStart(ctx context.Context, name string, from channel.StartFrom) (*startMark, error) {
	t, group := c.leases, c.stream+startGroupSuffix
	mark, err := t.getStart(ctx, group, name)
	if err != nil || mark != nil || from.Latest() {
		return mark, err
	}
	ls, err := t.list(ctx, leaseGroup(c.stream, name))
	if err != nil || len(ls) > 0 {
		return nil, err // it exists: it resumes where it stopped
	}
	mark = &startMark{From: from.Time, Until: time.Now().Add(startMargin)}
	item := t.key(group, name)
	item[attrUntil] = &types.AttributeValueMemberS{Value: mark.Until.UTC().Format(time.RFC3339Nano)}
	if !mark.From.IsZero() {
		item[attrFrom] = &types.AttributeValueMemberS{Value: mark.From.UTC().Format(time.RFC3339Nano)}
	}
	_, err = t.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(t.name), Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#s)"),
		ExpressionAttributeNames: map[string]string{"#s": attrShard},
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return t.getStart(ctx, group, name) // another replica started it first
	}
	if err != nil {
		return nil, fmt.Errorf("kinesis: storing the start of subscription %s: %w", name, err)
	}
	c.cfg.logger.Info("kinesis: subscription catching up with the events stored before it existed",
		"subscription", name, "stream", c.stream, "from", startName(from), "since", mark.From, "until", mark.Until)
	return mark, nil
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

// removeStart deletes the catch-up item of the subscription called name once its leases
// are gone (the last replica to remove it deleted them).
func (c *Channel) removeStart(ctx context.Context, name string) error {
	ls, err := c.leases.list(ctx, leaseGroup(c.stream, name))
	if err != nil || len(ls) > 0 {
		return err
	}
	_, err = c.leases.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(c.leases.name), Key: c.leases.key(c.stream+startGroupSuffix, name)})
	if err != nil {
		return fmt.Errorf("kinesis: deleting the start of subscription %s: %w", name, err)
	}
	return nil
}
