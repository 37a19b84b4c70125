package kinesis

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.Replayer = (*Channel)(nil)

// replayPage bounds the records of one GetRecords of a replay: with Kinesis's own bound
// of 10 MiB a call, all a replay holds in memory.
const replayPage = 500

// Retention returns the stream's retention period (channel.Replayer).
func (c *Channel) Retention(ctx context.Context) (time.Duration, error) {
	out, err := c.api.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(c.stream)})
	if err != nil {
		return 0, fmt.Errorf("kinesis: describing stream %s: %w", c.stream, channel.Refuse(channel.ErrUnavailable, "the channel's Kinesis stream did not answer", err))
	}
	return time.Duration(aws.ToInt32(out.StreamDescriptionSummary.RetentionPeriodHours)) * time.Hour, nil
}

// Replay streams the records of the stream whose arrival time is in [from, to)
// (channel.Replayer), shard after shard in the order ListShards gives (parents before
// the children a split or merge made of them): records of one partition key come in the
// order they were stored. Each shard is read from its oldest record (records before from
// are read and skipped) until a record arrived at or after to, its end (a closed shard),
// or its tip as the replay reaches it. One page of records (replayPage) is held at once.
// Records that are not Sluice frames are skipped. A replay held longer than a shard
// iterator lives (5 minutes) goes on after the last record it read with a new iterator.
func (c *Channel) Replay(ctx context.Context, from, to time.Time) iter.Seq2[channel.Stored, error] {
	return func(yield func(channel.Stored, error) bool) {
		fail := func(what string, err error) {
			yield(channel.Stored{}, fmt.Errorf("kinesis: replay of stream %s: %s: %w", c.stream, what, channel.Refuse(channel.ErrUnavailable, "the channel's Kinesis stream did not answer", err)))
		}
		var shards []types.Shard
		in := &kinesis.ListShardsInput{StreamName: aws.String(c.stream)}
		for {
			out, err := c.api.ListShards(ctx, in)
			if err != nil {
				fail("listing shards", err)
				return
			}
			shards = append(shards, out.Shards...)
			if out.NextToken == nil {
				break
			}
			in = &kinesis.ListShardsInput{NextToken: out.NextToken}
		}
		for _, s := range shards {
			if !c.replayShard(ctx, aws.ToString(s.ShardId), from, to, yield, fail) {
				return
			}
		}
	}
}

// replayShard yields the window's records of one shard; false when the replay stops.
func (c *Channel) replayShard(ctx context.Context, id string, from, to time.Time, yield func(channel.Stored, error) bool, fail func(string, error)) bool {
	// From the shard's oldest record, not an AT_TIMESTAMP iterator: the Kinesis-compatible
	// server Sluice is tested against does not answer those. What is before from is read
	// and skipped.
	it, err := c.api.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(c.stream), ShardId: aws.String(id),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		var gone *types.ResourceNotFoundException
		if errors.As(err, &gone) {
			return true // trimmed by retention meanwhile
		}
		fail("shard iterator of "+id, err)
		return false
	}
	iter := it.ShardIterator
	var last *string // sequence number of the last record read
	fresh := true    // iter was just handed out: its expiry is not renewed again
	for iter != nil {
		out, err := c.api.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(replayPage)})
		var expired *types.ExpiredIteratorException
		if err != nil && errors.As(err, &expired) && !fresh && ctx.Err() == nil {
			// Held longer than an iterator lives (5 minutes: a paused trigger, a low
			// rate): go on after the last record read with a new one.
			in := &kinesis.GetShardIteratorInput{StreamName: aws.String(c.stream), ShardId: aws.String(id),
				ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
			if last != nil {
				in.ShardIteratorType, in.StartingSequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, last
			}
			it, err := c.api.GetShardIterator(ctx, in)
			if err != nil {
				fail("shard iterator of "+id+" after its iterator expired", err)
				return false
			}
			iter, fresh = it.ShardIterator, true
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				yield(channel.Stored{}, ctx.Err())
				return false
			}
			if expired != nil {
				fail("reading shard "+id+": its new shard iterator expired at once", err)
				return false
			}
			fail("reading shard "+id, err)
			return false
		}
		fresh = false
		for _, r := range out.Records {
			last = r.SequenceNumber
			at := aws.ToTime(r.ApproximateArrivalTimestamp)
			if !at.Before(to) {
				return true
			}
			if at.Before(from) {
				continue
			}
			ev, routes, err := decodeFrame(r.Data)
			if err != nil {
				continue // not a Sluice event; the consumers skip it too
			}
			if !yield(channel.Stored{Event: ev, Time: at, Subscriptions: routes}, nil) {
				return false
			}
		}
		if len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 {
			return true // at the shard's tip
		}
		iter = out.NextShardIterator
	}
	return true
}
