package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
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
