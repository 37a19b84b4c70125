package kinesis_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
	"github.com/sluice-broker/sluice/event"
)

// TestRoundTripEveryAttribute: every context attribute, extensions and binary data (all
// 256 byte values) come back from the stream byte for byte.
func TestRoundTripEveryAttribute(t *testing.T) {
	c := newChannel(t, uniqueKey(t), t.TempDir())
	defer c.Close()
	data := make([]byte, 256)
	for i := range data {
		data[i] = byte(i)
	}
	want := map[string]*event.Event{
		"full": {SpecVersion: "1.0", ID: "full", Source: "/src", Type: "t", DataContentType: "application/octet-stream",
			DataSchema: "https://example.com/s", Subject: "Grüße aus Köln", Time: "2026-11-23T10:00:00.123Z",
			Extensions: []event.Extension{{Name: "partitionkey", Value: "k1"}, {Name: "traceparent", Value: "00-abc-def-01"}},
			Data:       data},
		"nodata": {SpecVersion: "1.0", ID: "nodata", Source: "/src", Type: "t"},
	}
	k := channeltest.Consume(t, c, "sub")
	channeltest.Publish(t, c, []string{"sub"}, want["full"], want["nodata"])
	for _, m := range channeltest.ReceiveN(t, k, 2, 20*time.Second) {
		got := m.Event()
		w := want[got.ID]
		if len(got.Data) == 0 {
			got.Data = nil
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %+v\nwant %+v", got.ID, got, w)
		}
		_ = m.Ack()
	}
}

// TestSplitKeepsOrderPerKey publishes events over 8 partition keys while the stream's
// only shard is split in two: each key's events arrive in publish order, all of them,
// because the children are read only after the parent is read to its end.
func TestSplitKeepsOrderPerKey(t *testing.T) {
	api := kinesistest.Client(t)
	key := uniqueKey(t)
	c := newChannel(t, key, t.TempDir(), kinesis.WithShards(1))
	defer c.Close()
	k := channeltest.Consume(t, c, "sub")
	const keys, per = 8, 60
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < per; i++ {
			var evs []*event.Event
			for j := 0; j < keys; j++ {
				evs = append(evs, &event.Event{SpecVersion: "1.0", ID: fmt.Sprintf("k%d-%d", j, i), Source: "/split", Type: "t",
					Extensions: []event.Extension{{Name: "partitionkey", Value: "k" + strconv.Itoa(j)}}})
			}
			channeltest.Publish(t, c, []string{"sub"}, evs...)
			if i == per/3 {
				split(t, api, c.Stream())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	next := map[string]int{}
	for _, m := range channeltest.ReceiveN(t, k, keys*per, 30*time.Second) {
		pk, _ := m.Event().Get("partitionkey")
		if want := fmt.Sprintf("%s-%d", pk, next[pk]); m.Event().ID != want {
			t.Fatalf("key %s: got %s, want %s", pk, m.Event().ID, want)
		}
		next[pk]++
		_ = m.Ack()
	}
	wg.Wait()
	shards, err := api.ListShards(context.Background(), &awskinesis.ListShardsInput{StreamName: aws.String(c.Stream())})
	if err != nil {
		t.Fatal(err)
	}
	if len(shards.Shards) != 3 {
		t.Fatalf("%d shards after the split, want the parent and two children", len(shards.Shards))
	}
}

// split splits the first shard of stream at the middle of its hash key range.
func split(t *testing.T, api *awskinesis.Client, stream string) {
	ctx := context.Background()
	out, err := api.ListShards(ctx, &awskinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := api.SplitShard(ctx, &awskinesis.SplitShardInput{StreamName: aws.String(stream),
		ShardToSplit:       out.Shards[0].ShardId,
		NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
		t.Error(err)
	}
}
