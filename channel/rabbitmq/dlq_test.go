package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/rabbitmq"
	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
	"github.com/sluice-broker/sluice/dlq"
	"github.com/sluice-broker/sluice/dlq/dlqtest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// openDLQ opens a channel of broker ns/broker with prefix (a new one when empty) and its
// dead-letter store bounded by lim; the test deletes the store's stream at its end.
func openDLQ(t *testing.T, url, prefix string, lim dlq.Limits) (*rabbitmq.Channel, dlq.Store) {
	t.Helper()
	fresh := prefix == ""
	if fresh {
		prefix = fmt.Sprintf("test-dlq-%d", rand.Uint32())
	}
	c, err := rabbitmq.New(context.Background(), "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if fresh {
		t.Cleanup(func() { deleteQueue(t, url, rabbitmq.DLQQueue(c.Exchange())) })
	}
	s, err := c.DLQStore(context.Background(), lim)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// TestDLQStore runs the contract every dead-letter store shares.
func TestDLQStore(t *testing.T) {
	url := rabbitmqtest.URL(t)
	dlqtest.Run(t, func(t *testing.T, lim dlq.Limits) dlq.Store {
		_, s := openDLQ(t, url, "", lim)
		return s
	})
}

func TestDLQStoreRefusesBadLimits(t *testing.T) {
	url := rabbitmqtest.URL(t)
	c, err := rabbitmq.New(context.Background(), "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(fmt.Sprintf("test-dlq-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.DLQStore(context.Background(), dlq.Limits{MaxEntries: 0, MaxBytes: 1, MaxAge: time.Hour}); err == nil {
		t.Fatal("DLQStore took --dlq-max-entries 0")
	}
}

// TestDLQStoreSharedAndSurvivesRestart stores through one channel, reads, deletes and
// evicts through another of the same broker (a replica), then reopens: a new process
// rebuilds the same entries, with their attempts, code and reason, from the stream.
func TestDLQStoreSharedAndSurvivesRestart(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lim := dlq.Limits{MaxEntries: 4, MaxBytes: 1 << 20, MaxAge: time.Hour}
	c, s := openDLQ(t, url, "", lim)
	prefix := c.Exchange()[:len(c.Exchange())-len(".ns.broker")]
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	replica, rs := openDLQ(t, url, prefix, lim)
	p, err := rs.List(ctx, "ns/t", 0, 10)
	if err != nil || p.Total != 3 {
		t.Fatalf("a replica lists %d entries (%v); want the 3 stored through the other", p.Total, err)
	}
	if err := rs.Delete(ctx, "ns/t", p.Entries[0].ID); err != nil {
		t.Fatal(err)
	}
	// The replica stores 3 more: with 2 held and a bound of 4, one is evicted.
	evicted := 0
	for i := 3; i < 6; i++ {
		n, err := rs.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 5))
		if err != nil {
			t.Fatal(err)
		}
		evicted += n
	}
	if evicted != 1 {
		t.Fatalf("the replica evicted %d; want 1", evicted)
	}
	want := "2,3,4,5,"
	if got := listIDs(t, s, "ns/t"); got != want {
		t.Fatalf("the first store lists %q after the replica's delete and puts; want %q", got, want)
	}
	if err := s.Delete(ctx, "ns/t", p.Entries[0].ID); !errors.Is(err, dlq.ErrNotFound) {
		t.Fatalf("deleting what the replica deleted: %v; want ErrNotFound", err)
	}
	_ = replica.Close()
	_ = c.Close()
	if _, err := s.List(ctx, "ns/t", 0, 10); !errors.Is(err, channel.ErrClosed) {
		t.Fatalf("List on a closed channel: %v; want ErrClosed", err)
	}
	_, again := openDLQ(t, url, prefix, lim)
	if got := listIDs(t, again, "ns/t"); got != want {
		t.Fatalf("after a restart the store lists %q; want %q", got, want)
	}
	p, _ = again.List(ctx, "ns/t", 0, 10)
	if e := p.Entries[0]; e.Attempts != 3 || e.Code != 503 || e.Reason != "busy" || e.Time.IsZero() {
		t.Fatalf("after a restart entry %+v lost its attempts, code, reason or time", e)
	}
	if n, err := again.Purge(ctx, "ns/t"); err != nil || n != 4 {
		t.Fatalf("purge: %d, %v; want 4", n, err)
	}
	_, fresh := openDLQ(t, url, prefix, lim)
	if got := listIDs(t, fresh, "ns/t"); got != "" {
		t.Fatalf("after a purge a new process lists %q", got)
	}
}

// TestDLQStoreSkipsForeignMessages: messages of the dead-letter stream that sluice did
// not write are skipped, and the entries around them still list.
func TestDLQStoreSkipsForeignMessages(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, s := openDLQ(t, url, "", dlq.DefaultLimits())
	if _, err := s.Put(ctx, "ns/t", dlqtest.Entry("a", 5)); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"", "x", "e\x05ns/t", "d\x04ns/t\xff", "e\x00"} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", rabbitmq.DLQQueue(c.Exchange()), false, false, amqp.Publishing{Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publishing %q: %v, %v", body, ok, err)
		}
	}
	if _, err := s.Put(ctx, "ns/t", dlqtest.Entry("b", 5)); err != nil {
		t.Fatal(err)
	}
	if got := listIDs(t, s, "ns/t"); got != "a,b," {
		t.Fatalf("listed %q; want a,b", got)
	}
}

func listIDs(t *testing.T, s dlq.Store, trigger string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := s.List(ctx, trigger, 0, dlq.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	ids := ""
	for _, e := range p.Entries {
		ids += e.Event.ID + ","
	}
	return ids
}

// TestDLQStoreReadsOnAfterReconnect: the store's reader consumes the stream again from
// where it stopped after the connection is lost: what was stored before and after is
// listed once each, on this store and on a new one.
func TestDLQStoreReadsOnAfterReconnect(t *testing.T) {
	u := rabbitmqtest.URL(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, pu.Host)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("test-dlq-%d", rand.Uint32())
	c, s := openDLQ(t, p.through(t, u), prefix, dlq.DefaultLimits())
	t.Cleanup(func() { deleteQueue(t, u, rabbitmq.DLQQueue(c.Exchange())) })
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint("before", i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	p.cut()
	sluicetest.Eventually(t, 30*time.Second, "a Put after the connection was cut", func() bool {
		_, err := s.Put(ctx, "ns/t", dlqtest.Entry("after", 5))
		return err == nil
	})
	want := "before0,before1,before2,after,"
	if got := listIDs(t, s, "ns/t"); got != want {
		t.Fatalf("listed %q after a reconnection; want %q", got, want)
	}
	_, again := openDLQ(t, u, prefix, dlq.DefaultLimits())
	if got := listIDs(t, again, "ns/t"); got != want {
		t.Fatalf("a new store lists %q; want %q", got, want)
	}
}

// BenchmarkDLQStorePut stores dead letters of 1 KiB one at a time, each waiting for
// RabbitMQ's confirm and for its message read back.
func BenchmarkDLQStorePut(b *testing.B) {
	url := rabbitmqtest.URL(b)
	_, s := openDLQBench(b, url, "")
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDLQStoreList lists one entry at a time (as a redrive checks each entry it
// hands over): each listing appends a sync message and waits for it read back.
func BenchmarkDLQStoreList(b *testing.B) {
	url := rabbitmqtest.URL(b)
	_, s := openDLQBench(b, url, "")
	ctx := context.Background()
	if _, err := s.Put(ctx, "ns/t", dlqtest.Entry("x", 1024)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if p, err := s.List(ctx, "ns/t", 0, 1); err != nil || p.Total != 1 {
			b.Fatalf("listed %d (%v)", p.Total, err)
		}
	}
}

// BenchmarkDLQStoreOpen is what a new process pays before its first listing: reading
// 10,000 dead letters of 1 KiB back from the stream.
func BenchmarkDLQStoreOpen(b *testing.B) {
	url := rabbitmqtest.URL(b)
	c, s := openDLQBench(b, url, "")
	ctx := context.Background()
	const n = 10_000
	for i := range n {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint(i), 1024)); err != nil {
			b.Fatal(err)
		}
	}
	prefix := c.Exchange()[:len(c.Exchange())-len(".ns.broker")]
	for b.Loop() {
		r, err := rabbitmq.New(ctx, "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		rs, _ := r.DLQStore(ctx, dlq.DefaultLimits())
		if p, err := rs.List(ctx, "ns/t", 0, 1); err != nil || p.Total != n {
			b.Fatalf("listed %d (%v); want %d", p.Total, err, n)
		}
		_ = r.Close()
	}
}

// openDLQBench is openDLQ for a benchmark.
func openDLQBench(b *testing.B, url, prefix string) (*rabbitmq.Channel, dlq.Store) {
	b.Helper()
	if prefix == "" {
		prefix = fmt.Sprintf("bench-dlq-%d", rand.Uint32())
	}
	c, err := rabbitmq.New(context.Background(), "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		deleteQueue(b, url, rabbitmq.DLQQueue(c.Exchange()))
	})
	s, err := c.DLQStore(context.Background(), dlq.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	return c, s
}

// TestDLQStoreStreamBound: with the stream bounded to 1 MiB, dead letters of two
// triggers evict each other oldest first once half a MiB follows them, and RabbitMQ
// frees the stream's oldest segments; a store opened afterwards (a restart) holds exactly
// what the running one holds: RabbitMQ freed nothing the store still listed. A dead
// letter over an eighth of the bound is refused, naming the flag.
func TestDLQStoreStreamBound(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("test-dlq-%d", rand.Uint32())
	open := func() (*rabbitmq.Channel, dlq.Store) {
		c, err := rabbitmq.New(ctx, "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(prefix), rabbitmq.WithDLQMaxBytes(rabbitmq.MinDLQMaxBytes))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		s, err := c.DLQStore(ctx, dlq.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		return c, s
	}
	c, s := open()
	t.Cleanup(func() { deleteQueue(t, url, rabbitmq.DLQQueue(c.Exchange())) })
	const n, size = 200, 20 << 10 // 4 MB in all
	evicted := 0
	for i := range n {
		k, err := s.Put(ctx, fmt.Sprintf("ns/t%d", i%2), dlqtest.Entry(fmt.Sprint(i), size))
		if err != nil {
			t.Fatal(err)
		}
		evicted += k
	}
	a, b := listIDs(t, s, "ns/t0"), listIDs(t, s, "ns/t1")
	pa, _ := s.List(ctx, "ns/t0", 0, dlq.MaxPage)
	pb, _ := s.List(ctx, "ns/t1", 0, dlq.MaxPage)
	kept := pa.Total + pb.Total
	if kept == 0 || pa.Bytes+pb.Bytes > rabbitmq.MinDLQMaxBytes/2 {
		t.Fatalf("kept %d entries of %d bytes; want some, within half the bound", kept, pa.Bytes+pb.Bytes)
	}
	// The evictions of one trigger made by the other's Put are reported by its next Put.
	for i := range 2 {
		k, err := s.Put(ctx, fmt.Sprintf("ns/t%d", i), dlqtest.Entry(fmt.Sprint("last", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		evicted += k
	}
	a, b = a+"last0,", b+"last1,"
	if want := n - kept; evicted < want {
		t.Fatalf("reported %d evictions; want at least the %d not kept", evicted, want)
	}
	if first := firstOffset(t, url, rabbitmq.DLQQueue(c.Exchange())); first == 0 {
		t.Fatal("RabbitMQ freed nothing of a stream of 4 MB bounded to 1 MiB")
	}
	_, again := open()
	if ga, gb := listIDs(t, again, "ns/t0"), listIDs(t, again, "ns/t1"); ga != a || gb != b {
		t.Fatalf("a restarted store holds\n%q and\n%q; the running one\n%q and\n%q", ga, gb, a, b)
	}
	_, err := s.Put(ctx, "ns/t0", dlqtest.Entry("big", rabbitmq.MinDLQMaxBytes/8))
	if err == nil || !strings.Contains(err.Error(), "--rabbitmq-dlq-max-bytes 1048576") {
		t.Fatalf("Put of a dead letter of an eighth of the bound: %v; want refused naming --rabbitmq-dlq-max-bytes", err)
	}
}

// firstOffset is the offset of the first message stream holds.
func firstOffset(t *testing.T, url, stream string) int64 {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(stream, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		return d.Headers["x-stream-offset"].(int64)
	case <-time.After(30 * time.Second):
		t.Fatal("no message in the stream")
	}
	return 0
}

// TestDLQStoreRefused: when RabbitMQ refuses the dead-letter stream (here another
// connection holds an exclusive queue of its name; a node without streams refuses it
// too), DLQStore fails naming it, so that the broker keeps its dead letters in memory.
func TestDLQStoreRefused(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := rabbitmq.New(ctx, "ns/broker", rabbitmq.WithURL(url), rabbitmq.WithPrefix(fmt.Sprintf("test-dlq-%d", rand.Uint32())))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(rabbitmq.DLQQueue(c.Exchange()), false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.DLQStore(ctx, dlq.DefaultLimits())
	if err == nil || !strings.Contains(err.Error(), rabbitmq.DLQQueue(c.Exchange())) {
		t.Fatalf("DLQStore with its stream refused: %v; want an error naming the stream", err)
	}
}

// TestDLQStoreStreamDeleted: an operator deletes the dead-letter stream, and its dead
// letters with it: the store forgets them, and reads the new stream from its start, so
// that what is stored afterwards is listed (here and by a new store).
func TestDLQStoreStreamDeleted(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, s := openDLQ(t, url, "", dlq.DefaultLimits())
	for i := range 3 {
		if _, err := s.Put(ctx, "ns/t", dlqtest.Entry(fmt.Sprint("before", i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	deleteQueue(t, url, rabbitmq.DLQQueue(c.Exchange()))
	sluicetest.Eventually(t, 30*time.Second, "the deleted dead letters forgotten", func() bool {
		return listIDs(t, s, "ns/t") == ""
	})
	if _, err := s.Put(ctx, "ns/t", dlqtest.Entry("after", 5)); err != nil {
		t.Fatal(err)
	}
	if got := listIDs(t, s, "ns/t"); got != "after," {
		t.Fatalf("listed %q after the stream was deleted; want after alone", got)
	}
	prefix := c.Exchange()[:len(c.Exchange())-len(".ns.broker")]
	if _, again := openDLQ(t, url, prefix, dlq.DefaultLimits()); listIDs(t, again, "ns/t") != "after," {
		t.Fatalf("a new store lists %q; want after alone", listIDs(t, again, "ns/t"))
	}
}
