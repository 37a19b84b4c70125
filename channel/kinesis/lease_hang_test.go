package kinesis

import (
	"context"
	"fmt"
	"log/slog"
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

// hangProxy forwards TCP connections to a server until frozen; then it forwards nothing
// more and answers nothing, keeping every connection open and accepting new ones: a
// server that hangs, not one that refuses.
type hangProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newHangProxy(t *testing.T, target string) *hangProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangProxy{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.keep(c)
			if !p.frozen.Load() {
				go p.forward(c)
			}
		}
	}()
	return p
}

func (p *hangProxy) keep(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst until frozen, then swallows what src sends.
func (p *hangProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *hangProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.keep(s)
	go p.pipe(s, c)
	p.pipe(c, s)
}

// takeWatch is a slog handler that, when a replica logs that it took a lease, records
// how many shards the other replica (old) was still reading at that moment: the new
// owner starts reading only after that log.
type takeWatch struct {
	old   *consumer
	mu    sync.Mutex
	takes []int // old's readers at each take
}

func (w *takeWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *takeWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *takeWatch) WithGroup(string) slog.Handler            { return w }
func (w *takeWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "kinesis: lease taken" {
		n := w.old.readers()
		w.mu.Lock()
		w.takes = append(w.takes, n)
		w.mu.Unlock()
	}
	return nil
}

func (w *takeWatch) seen() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.takes...)
}

// TestLeaseTableHang: a replica (a) whose lease table calls hang (DynamoDB reached
// through a proxy that stops answering, connections left open) stops reading its shard
// before the other replica (b), which reaches DynamoDB directly, sees the lease expire
// and takes it: the shard never has two readers.
func TestLeaseTableHang(t *testing.T) {
	target := strings.TrimPrefix(kinesistest.DynamoDBEndpoint(t), "http://")
	proxy := newHangProxy(t, target)
	ddbA := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + proxy.ln.Addr().String()),
		Credentials: credentials.NewStaticCredentialsProvider("sluice", "sluice", "")})
	api := kinesistest.Client(t)
	key := fmt.Sprintf("test/h%d", rand.Uint32())
	t.Cleanup(func() {
		_, _ = api.DeleteStream(context.Background(), &awskinesis.DeleteStreamInput{StreamName: aws.String(StreamName(key)), EnforceConsumerDeletion: aws.Bool(true)})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := fmt.Sprintf("sluice-test-%d", rand.Uint32())
	const d = 3 * time.Second
	a, err := New(ctx, key, WithAPI(api), WithShards(1), WithPollInterval(50*time.Millisecond),
		WithCheckpointInterval(100*time.Millisecond), WithLeaseTable(ddbA, table), WithLeaseDuration(d))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ka := channeltest.Consume(t, a, "sub").(*consumer)
	channeltest.Publish(t, a, []string{"sub"}, channeltest.Event("before"))
	channeltest.AckAll(t, channeltest.ReceiveN(t, ka, 1, 30*time.Second))

	watch := &takeWatch{old: ka}
	b, err := New(ctx, key, WithAPI(api), WithShards(1), WithPollInterval(50*time.Millisecond),
		WithCheckpointInterval(100*time.Millisecond), WithLeaseTable(kinesistest.DynamoDB(t), table),
		WithLeaseDuration(d), WithLogger(slog.New(watch)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kb := channeltest.Consume(t, b, "sub").(*consumer)
	// b has seen a's lease renewed for two lease durations and not taken it.
	time.Sleep(2 * d)
	if ka.readers() != 1 || kb.readers() != 0 || len(watch.seen()) != 0 {
		t.Fatalf("before the hang: a reads %d shards, b reads %d and took %d leases", ka.readers(), kb.readers(), len(watch.seen()))
	}

	proxy.frozen.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for kb.readers() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("b does not read the shard 30 s after a's lease table hung (a reads %d)", ka.readers())
		}
		time.Sleep(20 * time.Millisecond)
	}
	takes := watch.seen()
	if len(takes) != 1 || takes[0] != 0 {
		t.Fatalf("when b took the lease, a was reading %v shards (want [0]: a stops before b reads)", takes)
	}
	channeltest.Publish(t, b, []string{"sub"}, channeltest.Event("after"))
	ms := channeltest.ReceiveN(t, kb, 1, 30*time.Second)
	if id := ms[0].Event().ID; id != "after" {
		t.Fatalf("b got %s, want after (before was acked and checkpointed)", id)
	}
	channeltest.AckAll(t, ms)
	channeltest.ExpectNothing(t, ka, time.Second)
}
