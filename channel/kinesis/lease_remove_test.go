package kinesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
)

// TestLeaseRemoveAfterFailedRelease: a subscription removed while the lease table is
// unreachable reports an error (its consumer could not release its lease, nor the leases
// be deleted); removed again once the table answers, its leases are deleted, although
// the table still names this replica as their owner.
func TestLeaseRemoveAfterFailedRelease(t *testing.T) {
	target := strings.TrimPrefix(kinesistest.DynamoDBEndpoint(t), "http://")
	proxy := newCutProxy(t, target)
	ddb := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + proxy.ln.Addr().String()),
		Credentials: credentials.NewStaticCredentialsProvider("sluice", "sluice", "")})
	api := kinesistest.Client(t)
	key := fmt.Sprintf("test/r%d", rand.Uint32())
	t.Cleanup(func() {
		_, _ = api.DeleteStream(context.Background(), &awskinesis.DeleteStreamInput{StreamName: aws.String(StreamName(key)), EnforceConsumerDeletion: aws.Bool(true)})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := fmt.Sprintf("sluice-test-%d", rand.Uint32())
	c, err := New(ctx, key, WithAPI(api), WithShards(1), WithPollInterval(50*time.Millisecond),
		WithCheckpointInterval(100*time.Millisecond), WithLeaseTable(ddb, table), WithLeaseDuration(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kc := channeltest.Consume(t, c, "sub")
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Event("before"))
	channeltest.AckAll(t, channeltest.ReceiveN(t, kc, 1, 30*time.Second))
	direct := &leaseTable{api: kinesistest.DynamoDB(t), name: table}
	group := leaseGroup(c.stream, "sub")
	if ls, err := direct.list(ctx, group); err != nil || len(ls) != 1 || ls[0].owner != c.leases.owner {
		t.Fatalf("before: %v, %v; want one lease owned by this replica", ls, err)
	}

	proxy.setCut(true)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	err = c.Remove(rctx, "sub")
	rcancel()
	if err == nil {
		t.Fatal("Remove with the lease table cut off: nil error, want one")
	}
	proxy.setCut(false)
	rctx, rcancel = context.WithTimeout(ctx, 30*time.Second)
	err = c.Remove(rctx, "sub")
	rcancel()
	if err != nil {
		t.Fatalf("Remove once the table answers: %v", err)
	}
	if ls, err := direct.list(ctx, group); err != nil || len(ls) != 0 {
		t.Fatalf("after Remove: %v, %v; want no lease left", ls, err)
	}
}
