package kinesis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The lease table shares a stream's shards between replicas, as the Kinesis Client
// Library's does. It holds one item per (stream, subscription, shard):
//
//	group    (hash key)  "<stream>/<subscription>" (stream names have no '/')
//	shard    (range key) the shard id
//	owner    the replica reading the shard; absent when the lease is free
//	counter  a number the owner raises at every renewal (its heartbeat)
//	seq, skip, done  the shard's checkpoint (see shardCheck)
//
// Every write is conditional. A replica renews its leases (counter+1, on condition that it
// still owns them) every third of the lease duration, and writes checkpoints on the same
// condition: a failed condition means the lease was taken, and the replica stops reading
// the shard. A lease whose counter a replica has seen unchanged for the lease duration (on
// its own clock: no clocks are compared) is expired, and may be taken on condition that
// its counter and owner are still the ones seen. Its owner stops reading the shard before
// that, at the start of its last successful renewal plus the lease duration less
// leaseMargin, however long its calls to the table hang. Replicas balance: each takes free and
// expired leases up to its share (the leases over the live owners, rounded up), and one
// below its share steals one lease per round from the owner holding the most, when that
// owner holds at least two more than it. Closing releases the replica's leases with their
// last checkpoints, so the others take them at their next round.
const (
	attrGroup   = "group"
	attrShard   = "shard"
	attrOwner   = "owner"
	attrCounter = "counter"
	attrSeq     = "seq"
	attrSkip    = "skip"
	attrDone    = "done"

	// DefaultLeaseDuration is how long a replica's lease outlives its last renewal: after
	// it, another replica takes the shard over from its checkpoint.
	DefaultLeaseDuration = 10 * time.Second
	// MinLeaseDuration is the shortest lease duration allowed (renewals every third).
	MinLeaseDuration = time.Second
)

// errLeaseLost is returned by a conditional write of a lease this replica no longer owns.
var errLeaseLost = errors.New("kinesis: lease lost to another replica")

// leaseTable is the DynamoDB table of leases, seen by one replica (owner).
type leaseTable struct {
	api      *dynamodb.Client
	name     string
	owner    string
	duration time.Duration
}

// lease is one item of the table.
type lease struct {
	shard   string
	owner   string // "" when free
	counter int64
	check   shardCheck
	paused  bool // an item of the trigger flags (state.go)
}

// newOwner returns a replica's owner id: host, pid and a random suffix, unique per Channel.
func newOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// leaseGroup is the hash key of sub's leases on stream.
func leaseGroup(stream, sub string) string { return stream + "/" + sub }

// ensure creates the table if it is missing and waits until it is active, within ctx.
func (t *leaseTable) ensure(ctx context.Context) error {
	_, err := t.api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(t.name),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrGroup), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrShard), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrGroup), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrShard), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("kinesis: creating lease table %s: %w", t.name, err)
	}
	for {
		out, err := t.api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.name)})
		if err != nil {
			return fmt.Errorf("kinesis: lease table %s: %w", t.name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kinesis: lease table %s not active: %w", t.name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (t *leaseTable) key(group, shard string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrGroup: &types.AttributeValueMemberS{Value: group},
		attrShard: &types.AttributeValueMemberS{Value: shard},
	}
}

// list returns the leases of group.
func (t *leaseTable) list(ctx context.Context, group string) ([]lease, error) {
	var out []lease
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(t.name),
		KeyConditionExpression:    aws.String("#g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup},
		ExpressionAttributeValues: map[string]types.AttributeValue{":g": &types.AttributeValueMemberS{Value: group}},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		res, err := t.api.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("kinesis: reading leases of %s: %w", group, err)
		}
		for _, item := range res.Items {
			l, err := decodeLease(item)
			if err != nil {
				return nil, fmt.Errorf("kinesis: lease table %s, group %s: %w", t.name, group, err)
			}
			out = append(out, l)
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// decodeLease reads one item.
func decodeLease(item map[string]types.AttributeValue) (lease, error) {
	var l lease
	str := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	l.shard = str(attrShard)
	if l.shard == "" {
		return l, errors.New("an item without a shard")
	}
	l.owner = str(attrOwner)
	l.check.Seq = str(attrSeq)
	if v, ok := item[attrCounter].(*types.AttributeValueMemberN); ok {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return l, fmt.Errorf("shard %s: counter %q: %w", l.shard, v.Value, err)
		}
		l.counter = n
	}
	if v, ok := item[attrDone].(*types.AttributeValueMemberBOOL); ok {
		l.check.Done = v.Value
	}
	if v, ok := item[attrSkip].(*types.AttributeValueMemberSS); ok {
		l.check.Skip = v.Value
	}
	if v, ok := item[attrPaused].(*types.AttributeValueMemberBOOL); ok {
		l.paused = v.Value
	}
	return l, nil
}

// create adds a free lease of shard starting at check, unless the shard has one.
func (t *leaseTable) create(ctx context.Context, group, shard string, check shardCheck) error {
	item := t.key(group, shard)
	item[attrCounter] = &types.AttributeValueMemberN{Value: "0"}
	if check.Seq != "" {
		item[attrSeq] = &types.AttributeValueMemberS{Value: check.Seq}
	}
	if len(check.Skip) > 0 {
		item[attrSkip] = &types.AttributeValueMemberSS{Value: check.Skip}
	}
	if check.Done {
		item[attrDone] = &types.AttributeValueMemberBOOL{Value: true}
	}
	_, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(t.name), Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#s)"),
		ExpressionAttributeNames: map[string]string{"#s": attrShard},
	})
	var failed *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &failed) {
		return fmt.Errorf("kinesis: creating the lease of %s shard %s: %w", group, shard, err)
	}
	return nil
}

// take makes this replica the owner of l, on condition that l's owner and counter are
// still the ones seen, and returns the lease as written (its latest checkpoint).
func (t *leaseTable) take(ctx context.Context, group string, l lease) (lease, error) {
	names := map[string]string{"#o": attrOwner, "#c": attrCounter}
	values := map[string]types.AttributeValue{
		":me":  &types.AttributeValueMemberS{Value: t.owner},
		":c":   &types.AttributeValueMemberN{Value: strconv.FormatInt(l.counter, 10)},
		":one": &types.AttributeValueMemberN{Value: "1"},
	}
	cond := "#c = :c AND attribute_not_exists(#o)"
	if l.owner != "" {
		cond = "#c = :c AND #o = :was"
		values[":was"] = &types.AttributeValueMemberS{Value: l.owner}
	}
	out, err := t.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(t.name), Key: t.key(group, l.shard),
		UpdateExpression:          aws.String("SET #o = :me, #c = #c + :one"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return lease{}, errLeaseLost
	}
	if err != nil {
		return lease{}, fmt.Errorf("kinesis: taking the lease of %s shard %s: %w", group, l.shard, err)
	}
	return decodeLease(out.Attributes)
}

// renew raises the counter of a lease this replica owns; errLeaseLost when it does not.
func (t *leaseTable) renew(ctx context.Context, group, shard string) error {
	return t.ownedUpdate(ctx, group, shard, "SET #c = #c + :one", map[string]types.AttributeValue{
		":one": &types.AttributeValueMemberN{Value: "1"}}, "renewing")
}

// checkpoint writes check into a lease this replica owns; with release, it gives the
// lease up too (others may take it at once). errLeaseLost when the lease is not owned.
func (t *leaseTable) checkpoint(ctx context.Context, group, shard string, check shardCheck, release bool) error {
	var set, remove []string
	values := map[string]types.AttributeValue{":done": &types.AttributeValueMemberBOOL{Value: check.Done}}
	set = append(set, "#d = :done")
	if check.Seq != "" {
		set = append(set, "#q = :seq")
		values[":seq"] = &types.AttributeValueMemberS{Value: check.Seq}
	} else {
		remove = append(remove, "#q")
	}
	if len(check.Skip) > 0 {
		set = append(set, "#k = :skip")
		values[":skip"] = &types.AttributeValueMemberSS{Value: check.Skip}
	} else {
		remove = append(remove, "#k")
	}
	if release {
		set = append(set, "#c = #c + :one")
		values[":one"] = &types.AttributeValueMemberN{Value: "1"}
		remove = append(remove, "#o")
	}
	expr := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	return t.ownedUpdate(ctx, group, shard, expr, values, "writing the checkpoint of")
}

// ownedUpdate applies expr to a lease on condition that this replica owns it.
func (t *leaseTable) ownedUpdate(ctx context.Context, group, shard, expr string, values map[string]types.AttributeValue, what string) error {
	values[":me"] = &types.AttributeValueMemberS{Value: t.owner}
	names := map[string]string{"#o": attrOwner}
	for ph, attr := range map[string]string{"#c": attrCounter, "#q": attrSeq, "#k": attrSkip, "#d": attrDone} {
		if strings.Contains(expr, ph) {
			names[ph] = attr
		}
	}
	_, err := t.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(t.name), Key: t.key(group, shard),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String("#o = :me"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("kinesis: %s the lease of %s shard %s: %w", what, group, shard, err)
	}
	return nil
}

// remove deletes the lease of shard if no replica owns it.
func (t *leaseTable) remove(ctx context.Context, group, shard string) error {
	return t.removeSeen(ctx, group, lease{shard: shard})
}

// removeSeen deletes lease l on condition that it is still as seen: free, or with the
// same owner and counter. A lease written since is kept.
func (t *leaseTable) removeSeen(ctx context.Context, group string, l lease) error {
	in := &dynamodb.DeleteItemInput{TableName: aws.String(t.name), Key: t.key(group, l.shard),
		ConditionExpression:      aws.String("attribute_not_exists(#o)"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner}}
	if l.owner != "" {
		in.ConditionExpression = aws.String("#o = :o AND #c = :c")
		in.ExpressionAttributeNames["#c"] = attrCounter
		in.ExpressionAttributeValues = map[string]types.AttributeValue{
			":o": &types.AttributeValueMemberS{Value: l.owner},
			":c": &types.AttributeValueMemberN{Value: strconv.FormatInt(l.counter, 10)},
		}
	}
	_, err := t.api.DeleteItem(ctx, in)
	var failed *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &failed) {
		return fmt.Errorf("kinesis: deleting the lease of %s shard %s: %w", group, l.shard, err)
	}
	return nil
}

// removeGroup deletes every lease of group, unless another replica is alive and owns one
// of them: it still reads the subscription (during a rollout that removes it), and
// deleting the others' leases would make it read their shards again from the oldest
// record; the last replica to remove the subscription deletes them. Leases this replica
// still owns (a release that failed) do not count, nor do those of an owner seen not
// renewing them for the lease duration (a replica gone): removeGroup watches such leases
// until they expire or change, from the sightings in seen (the closed consumer's, may be
// nil), within ctx, and says so when ctx ends first.
func (t *leaseTable) removeGroup(ctx context.Context, group string, seen map[string]sighting) error {
	return t.removeGroupThen(ctx, group, seen, nil)
}

// removeGroupThen is removeGroup calling before, if not nil, with the leases it is
// about to delete; an error of before keeps them.
func (t *leaseTable) removeGroupThen(ctx context.Context, group string, seen map[string]sighting, before func([]lease) error) error {
	obs := observer{seen: maps.Clone(seen)}
	for {
		ls, err := t.list(ctx, group)
		if err != nil {
			return err
		}
		now := time.Now()
		var waiting []string
		for _, l := range ls {
			if l.owner == "" || l.owner == t.owner {
				continue
			}
			if s, ok := obs.seen[l.shard]; ok && (s.owner != l.owner || s.counter != l.counter) {
				return nil // renewed or taken since seen: its owner is alive
			}
		}
		obs.observe(ls, now)
		for _, l := range ls {
			if l.owner != "" && l.owner != t.owner && !obs.expired(l, now, t.duration) {
				waiting = append(waiting, l.owner)
			}
		}
		if len(waiting) == 0 {
			if before != nil {
				if err := before(ls); err != nil {
					return err
				}
			}
			var errs []error
			for _, l := range ls {
				errs = append(errs, t.removeSeen(ctx, group, l))
			}
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kinesis: leases of %s kept: owned by %s, not seen unrenewed for the lease duration (%v) yet: %w",
				group, strings.Join(slices.Compact(slices.Sorted(slices.Values(waiting))), ", "), t.duration, ctx.Err())
		case <-time.After(t.duration / 5):
		}
	}
}

// sighting is when a replica first saw a lease with its current owner and counter.
type sighting struct {
	owner   string
	counter int64
	at      time.Time
}

// observer tells expired leases: those whose owner and counter it has seen unchanged for
// the lease duration. It is used by one goroutine.
type observer struct {
	seen map[string]sighting
}

// observe records ls as seen at now and forgets shards no longer listed.
func (o *observer) observe(ls []lease, now time.Time) {
	if o.seen == nil {
		o.seen = map[string]sighting{}
	}
	keep := make(map[string]bool, len(ls))
	for _, l := range ls {
		keep[l.shard] = true
		if s, ok := o.seen[l.shard]; ok && s.owner == l.owner && s.counter == l.counter {
			continue
		}
		o.seen[l.shard] = sighting{owner: l.owner, counter: l.counter, at: now}
	}
	for id := range o.seen {
		if !keep[id] {
			delete(o.seen, id)
		}
	}
}

// expired reports whether l's owner has not renewed it for d as of now.
func (o *observer) expired(l lease, now time.Time, d time.Duration) bool {
	s, ok := o.seen[l.shard]
	return l.owner != "" && ok && now.Sub(s.at) >= d
}

// plan returns the leases me should try to take this round, from ls (the leases of shards
// that are not done): free and expired ones (expired reports which) up to its share, or,
// when none is free and me holds fewer than its share, one lease of the owner holding the
// most, if that owner holds at least two more than me.
func plan(me string, ls []lease, expired func(lease) bool) []lease {
	held := map[string]int{me: 0}
	var free []lease
	for _, l := range ls {
		if l.owner == "" || l.owner != me && expired(l) {
			free = append(free, l)
			continue
		}
		held[l.owner]++
	}
	share := (len(ls) + len(held) - 1) / len(held)
	want := share - held[me]
	if want <= 0 {
		return nil
	}
	if len(free) > 0 {
		slices.SortFunc(free, func(a, b lease) int { return strings.Compare(a.shard, b.shard) })
		return free[:min(want, len(free))]
	}
	most := ""
	for o, n := range held {
		if o != me && (most == "" || n > held[most] || n == held[most] && o < most) {
			most = o
		}
	}
	if most == "" || held[most] < held[me]+2 {
		return nil
	}
	var theirs []lease
	for _, l := range ls {
		if l.owner == most {
			theirs = append(theirs, l)
		}
	}
	slices.SortFunc(theirs, func(a, b lease) int { return strings.Compare(a.shard, b.shard) })
	return theirs[len(theirs)-1:]
}
