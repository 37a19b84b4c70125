package kafka

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
)

var _ channel.Replayer = (*Channel)(nil)

// replayPoll is how many records one poll of a replay hands over at most: with the
// fetch bounds it is all a replay holds in memory.
const replayPoll = 256

// replayIdle is how long a replay waits for a record of a partition it has not read to
// its end before it gives up with an error.
const replayIdle = 30 * time.Second

// Retention returns the topic's retention.ms (channel.Replayer): records stay at least
// that long, delivered or not. 0 means the topic keeps them for ever (retention.ms -1).
func (c *Channel) Retention(ctx context.Context) (time.Duration, error) {
	rcs, err := c.adm.DescribeTopicConfigs(ctx, c.topic)
	if err != nil {
		return 0, fmt.Errorf("kafka: describing topic %s: %w", c.topic, channel.Refuse(channel.ErrUnavailable, "the channel's Kafka cluster did not answer", err))
	}
	rc, err := rcs.On(c.topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, fmt.Errorf("kafka: describing topic %s: %w", c.topic, err)
	}
	for _, cf := range rc.Configs {
		if cf.Key != "retention.ms" || cf.Value == nil {
			continue
		}
		ms, err := strconv.ParseInt(*cf.Value, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("kafka: topic %s: retention.ms %q: %w", c.topic, *cf.Value, err)
		}
		if ms < 0 {
			return 0, nil
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	return 0, fmt.Errorf("kafka: topic %s: no retention.ms in its configuration", c.topic)
}

// Replay streams the records of the topic whose timestamp (when they were produced) is
// in [from, to) (channel.Replayer), partition by partition interleaved as the cluster
// returns them: records of one partitionkey come in the order they were stored. It reads
// from the first offset at or after from up to the end offsets as they were when it
// started, with a client of its own outside any consumer group: the subscriptions'
// committed positions are not touched. At most one poll of records (replayPoll, within
// the fetch byte bounds) is held at once.
func (c *Channel) Replay(ctx context.Context, from, to time.Time) iter.Seq2[channel.Stored, error] {
	return func(yield func(channel.Stored, error) bool) {
		fail := func(what string, err error) {
			yield(channel.Stored{}, fmt.Errorf("kafka: replay of topic %s: %s: %w", c.topic, what, channel.Refuse(channel.ErrUnavailable, "the channel's Kafka cluster did not answer", err)))
		}
		starts, err := c.adm.ListOffsetsAfterMilli(ctx, from.UnixMilli(), c.topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			fail("listing offsets at "+from.Format(time.RFC3339), err)
			return
		}
		ends, err := c.adm.ListEndOffsets(ctx, c.topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			fail("listing end offsets", err)
			return
		}
		begin := make(map[int32]kgo.Offset)
		end := make(map[int32]int64)
		starts.Each(func(o kadm.ListedOffset) {
			e, ok := ends.Lookup(c.topic, o.Partition)
			if ok && o.Offset < e.Offset {
				begin[o.Partition] = kgo.NewOffset().At(o.Offset)
				end[o.Partition] = e.Offset
			}
		})
		if len(begin) == 0 {
			return
		}
		cl, err := kgo.NewClient(c.clientOpts(
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.topic: begin}),
			kgo.FetchMaxBytes(fetchMaxBytes),
			kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
			kgo.FetchMaxWait(500*time.Millisecond),
		)...)
		if err != nil {
			yield(channel.Stored{}, fmt.Errorf("kafka: replay of topic %s: %w", c.topic, err))
			return
		}
		defer cl.Close()
		for len(end) > 0 {
			pctx, cancel := context.WithTimeout(ctx, replayIdle)
			fs := cl.PollRecords(pctx, replayPoll)
			idle := pctx.Err() != nil && fs.NumRecords() == 0
			cancel()
			if ctx.Err() != nil {
				yield(channel.Stored{}, ctx.Err())
				return
			}
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) {
				if ferr == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					ferr = err
				}
			})
			if ferr != nil {
				fail("fetching", ferr)
				return
			}
			if idle {
				fail(fmt.Sprintf("no record came for %s with %d partitions not read to their end", replayIdle, len(end)), context.DeadlineExceeded)
				return
			}
			for it := fs.RecordIter(); !it.Done(); {
				r := it.Next()
				last, ok := end[r.Partition]
				if !ok {
					continue
				}
				if r.Offset >= last || !r.Timestamp.Before(to) {
					delete(end, r.Partition)
					cl.PauseFetchPartitions(map[string][]int32{c.topic: {r.Partition}})
					continue
				}
				if r.Offset+1 >= last {
					delete(end, r.Partition)
				}
				if r.Timestamp.Before(from) {
					continue
				}
				st := channel.Stored{Event: decodeRecord(r), Time: r.Timestamp, Subscriptions: routes(r)}
				if !yield(st, nil) {
					return
				}
			}
		}
	}
}

// routes returns the subscriptions r was routed to (its sluice-sub headers).
func routes(r *kgo.Record) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == headerSub {
			out = append(out, string(h.Value))
		}
	}
	return out
}
