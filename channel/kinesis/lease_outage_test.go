package kinesis

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
)

// cutProxy forwards TCP connections to a server until cut: then it closes every
// connection and refuses new ones, until mend.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.cut.Load() {
				c.Close()
				continue
			}
			go p.forward(c)
		}
	}()
	return p
}

func (p *cutProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); s.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) setCut(cut bool) {
	p.cut.Store(cut)
	if cut {
		p.closeAll()
	}
}

// readers returns the shards k reads.
func (k *consumer) readers() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.shards)
}

// TestLeaseTableOutage: a replica that cannot reach the lease table for longer than the
// lease duration stops reading its shard (another replica may have taken it); once the
// table answers again it takes its own lease back and delivers what was stored meanwhile.
func TestLeaseTableOutage(t *testing.T) {
	target := strings.TrimPrefix(kinesistest.DynamoDBEndpoint(t), "http://")
	proxy := newCutProxy(t, target)
	ddb := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + proxy.ln.Addr().String()),
		Credentials: credentials.NewStaticCredentialsProvider("sluice", "sluice", "")})
	api := kinesistest.Client(t)
	key := fmt.Sprintf("test/o%d", rand.Uint32())
	t.Cleanup(func() {
		_, _ = api.DeleteStream(context.Background(), &awskinesis.DeleteStreamInput{StreamName: aws.String(StreamName(key)), EnforceConsumerDeletion: aws.Bool(true)})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table := fmt.Sprintf("sluice-test-%d", rand.Uint32())
	c, err := New(ctx, key, WithAPI(api), WithShards(1), WithPollInterval(50*time.Millisecond),
		WithCheckpointInterval(100*time.Millisecond), WithLeaseTable(ddb, table), WithLeaseDuration(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kc := channeltest.Consume(t, c, "sub")
	k := kc.(*consumer)
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Event("before"))
	channeltest.AckAll(t, channeltest.ReceiveN(t, kc, 1, 30*time.Second))
	direct := &leaseTable{api: kinesistest.DynamoDB(t), name: table}
	deadline := time.Now().Add(30 * time.Second)
	for { // the ack reaches the lease's checkpoint
		ls, err := direct.list(ctx, k.group)
		if err == nil && len(ls) == 1 && ls[0].check.Seq != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint in the lease after 30 s: %v, %v", ls, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	proxy.setCut(true)
	deadline = time.Now().Add(30 * time.Second)
	for k.readers() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the replica still reads its shard 30 s after the lease table went away")
		}
		time.Sleep(50 * time.Millisecond)
	}
	channeltest.Publish(t, c, []string{"sub"}, channeltest.Event("during"))
	channeltest.ExpectNothing(t, kc, time.Second)

	proxy.setCut(false)
	ms := channeltest.ReceiveN(t, kc, 1, 30*time.Second)
	if id := ms[0].Event().ID; id != "during" {
		t.Fatalf("after the outage: got %s, want the event stored during it (the one before was acked)", id)
	}
	channeltest.AckAll(t, ms)
}
