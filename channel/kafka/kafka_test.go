package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/channeltest"
	"github.com/sluice-broker/sluice/channel/kafka"
	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// newChannel opens a channel on a topic of its own on the test cluster.
func newChannel(t testing.TB, opts ...kafka.Option) (*kafka.Channel, []string) {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	prefix := fmt.Sprintf("test-%s-%d", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), rand.Uint32())
	opts = append([]kafka.Option{
		kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(prefix), kafka.WithPartitions(4),
		kafka.WithCommitInterval(100 * time.Millisecond), kafka.WithLagInterval(200 * time.Millisecond),
	}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := kafka.New(ctx, "ns/broker", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, brokers
}

func ev(id string, ext ...event.Extension) *event.Event {
	return &event.Event{SpecVersion: "1.0", ID: id, Source: "/test", Type: "io.sluice.test", Extensions: ext, Data: []byte(`{"id":"` + id + `"}`)}
}

func TestRoundTripPreservesEvents(t *testing.T) {
	c, _ := newChannel(t)
	k, err := c.Consume(channeltest.Ctx(t, 30*time.Second), "sub")
	if err != nil {
		t.Fatal(err)
	}
	binary := make([]byte, 2048)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	want := map[string]*event.Event{
		"full": {
			SpecVersion: "1.0", ID: "full", Source: "urn:x:y", Type: "io.sluice.full",
			DataContentType: "application/json; charset=utf-8", DataSchema: "https://example.com/s.json",
			Subject: "ünïcode subject", Time: "2026-03-04T05:06:07.123456789Z",
			Extensions: []event.Extension{{Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
				{Name: "partitionkey", Value: "k"}, {Name: "emptyext", Value: ""}, {Name: "num", Value: "42"}},
			Data: []byte(`{"a":[1,2,3]}`),
		},
		"nodata": {SpecVersion: "1.0", ID: "nodata", Source: "/s", Type: "t"},
		"binary": {SpecVersion: "1.0", ID: "binary", Source: "/s", Type: "t", DataContentType: "application/octet-stream", Data: binary},
	}
	channeltest.Publish(t, c, []string{"sub"}, want["full"], want["nodata"], want["binary"])
	for _, m := range channeltest.ReceiveN(t, k, len(want), 20*time.Second) {
		got := m.Event()
		if w := want[got.ID]; !reflect.DeepEqual(got, w) {
			t.Errorf("event %s:\n got %#v\nwant %#v", got.ID, got, w)
		}
		if err := m.Ack(); err != nil {
			t.Error(err)
		}
	}
}

func TestPartitionKeyIsRecordKeyAndOrdersPerKey(t *testing.T) {
	c, brokers := newChannel(t)
	k, err := c.Consume(channeltest.Ctx(t, 30*time.Second), "sub")
	if err != nil {
		t.Fatal(err)
	}
	const keys, per = 4, 40
	var evs []*event.Event
	for i := 0; i < per; i++ {
		for j := 0; j < keys; j++ {
			evs = append(evs, ev(fmt.Sprintf("%d-%d", j, i), event.Extension{Name: "partitionkey", Value: "key" + strconv.Itoa(j)}))
		}
	}
	for i := 0; i < len(evs); i += 10 { // several Publish calls of 10 events
		channeltest.Publish(t, c, []string{"sub"}, evs[i:i+10]...)
	}
	next := make([]int, keys)
	for _, m := range channeltest.ReceiveN(t, k, len(evs), 20*time.Second) {
		var j, i int
		if _, err := fmt.Sscanf(m.Event().ID, "%d-%d", &j, &i); err != nil {
			t.Fatal(err)
		}
		if i != next[j] {
			t.Fatalf("key%d: got event %d, want %d (out of order)", j, i, next[j])
		}
		next[j]++
		_ = m.Ack()
	}

	// The records themselves carry the key, as Kafka tools see them.
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(c.Topic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := channeltest.Ctx(t, 30*time.Second)
	seen := 0
	for seen < len(evs) {
		fs := raw.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d raw records: %v", seen, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen++
			var pk, id string
			for _, h := range r.Headers {
				switch h.Key {
				case "ce_partitionkey":
					pk = string(h.Value)
				case "ce_id":
					id = string(h.Value)
				}
			}
			if string(r.Key) != pk || pk == "" {
				t.Errorf("record %s: key %q, ce_partitionkey %q", id, r.Key, pk)
			}
		})
	}
}

func TestRestartRedeliversExactlyTheUnacked(t *testing.T) {
	c, brokers := newChannel(t, kafka.WithPartitions(1))
	ctx := channeltest.Ctx(t, 30*time.Second)
	k, err := c.Consume(ctx, "sub")
	if err != nil {
		t.Fatal(err)
	}
	var evs []*event.Event
	for i := 0; i < 10; i++ {
		evs = append(evs, ev(strconv.Itoa(i)))
	}
	channeltest.Publish(t, c, []string{"sub"}, evs...)
	acked := map[string]bool{"0": true, "1": true, "2": true, "4": true, "6": true, "7": true}
	ms := channeltest.ReceiveN(t, k, 10, 20*time.Second)
	for _, i := range []int{7, 1, 4, 0, 6, 2} { // out of order
		if err := ms[i].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	ms[9].Release()
	if err := k.Close(); err != nil { // commits what is settled
		t.Fatal(err)
	}

	// Nothing unsettled is committed: the group's offset is the first unacked record.
	adm := kadm.NewClient(mustClient(t, brokers))
	offs, err := adm.FetchOffsets(ctx, c.Topic()+"/sub")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(c.Topic(), 0); !ok || o.At != 3 {
		t.Fatalf("committed offset %+v, want 3", o)
	}

	k, err = c.Consume(ctx, "sub")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range channeltest.ReceiveN(t, k, 4, 20*time.Second) {
		got[m.Event().ID] = true
		_ = m.Ack()
	}
	channeltest.ExpectNothing(t, k, time.Second)
	for i := 0; i < 10; i++ {
		id := strconv.Itoa(i)
		if got[id] == acked[id] {
			t.Errorf("event %s: acked %v, redelivered %v", id, acked[id], got[id])
		}
	}
}

func mustClient(t testing.TB, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestRoutingKeepsSubscriptionsApart(t *testing.T) {
	c, _ := newChannel(t)
	ctx := channeltest.Ctx(t, 30*time.Second)
	a, err := c.Consume(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Consume(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	channeltest.Publish(t, c, []string{"a"}, ev("a1"), ev("a2"))
	channeltest.Publish(t, c, []string{"b"}, ev("b1"))
	channeltest.Publish(t, c, []string{"a", "b"}, ev("ab"))
	channeltest.Publish(t, c, nil, ev("none")) // routed nowhere: not stored
	check := func(k channel.Consumer, want ...string) {
		t.Helper()
		var got []string
		for _, m := range channeltest.ReceiveN(t, k, len(want), 20*time.Second) {
			got = append(got, m.Event().ID)
			_ = m.Ack()
		}
		channeltest.ExpectNothing(t, k, 500*time.Millisecond)
		if strings.Join(sorted(got), ",") != strings.Join(sorted(want), ",") {
			t.Errorf("got %v, want %v", got, want)
		}
	}
	check(a, "a1", "a2", "ab")
	check(b, "b1", "ab")
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestLenReportsLag(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, _ := newChannel(t, kafka.WithRegisterer(reg))
	k, err := c.Consume(channeltest.Ctx(t, 30*time.Second), "lagging")
	if err != nil {
		t.Fatal(err)
	}
	var evs []*event.Event
	for i := 0; i < 20; i++ {
		evs = append(evs, ev(strconv.Itoa(i)))
	}
	channeltest.Publish(t, c, []string{"lagging"}, evs...)
	sluicetest.Eventually(t, 20*time.Second, "Len() == 20", func() bool { return k.Len() == 20 })
	sluicetest.Eventually(t, 20*time.Second, "lag metric == 20", func() bool { return gauge(t, reg, "sluice_kafka_consumer_lag") == 20 })
	if v := gauge(t, reg, "sluice_kafka_published_records_total"); v != 20 {
		t.Errorf("published metric %v, want 20", v)
	}
	for _, m := range channeltest.ReceiveN(t, k, 20, 20*time.Second) {
		_ = m.Ack()
	}
	sluicetest.Eventually(t, 20*time.Second, "Len() == 0", func() bool { return k.Len() == 0 })
}

// TestLenCountsPublishesAtOnce: with the lag refresh an hour away, Len still counts
// every record this process published and the consumer has not fetched (the consumer
// stops fetching at 1,024 unsettled), and falls to zero as they are settled.
func TestLenCountsPublishesAtOnce(t *testing.T) {
	c, _ := newChannel(t, kafka.WithLagInterval(time.Hour))
	k, err := c.Consume(channeltest.Ctx(t, 30*time.Second), "burst")
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	evs := make([]*event.Event, n)
	for i := range evs {
		evs[i] = ev(strconv.Itoa(i))
	}
	channeltest.Publish(t, c, []string{"burst"}, evs...)
	if got := k.Len(); got != n {
		t.Fatalf("Len() = %d right after publishing %d, want %d", got, n, n)
	}
	for _, m := range channeltest.ReceiveN(t, k, 1000, 20*time.Second) {
		_ = m.Ack()
	}
	if got := k.Len(); got != n-1000 {
		t.Errorf("Len() = %d after settling 1000 of %d, want %d", got, n, n-1000)
	}
	for range (n - 1000) / 500 { // at most 1,024 are handed out unsettled
		for _, m := range channeltest.ReceiveN(t, k, 500, 20*time.Second) {
			_ = m.Ack()
		}
	}
	if got := k.Len(); got != 0 {
		t.Errorf("Len() = %d after settling all, want 0", got)
	}
}

// gauge returns the value of the one series of the gauge or counter called name in reg.
func gauge(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	series := sluicetest.Gather(t, reg, name)
	if len(series) != 1 {
		t.Fatalf("metric %s: %d series gathered (%v), want 1", name, len(series), series)
	}
	for _, v := range series {
		return v
	}
	return 0
}

// refusedAddr is an address nothing listens on.
func refusedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// blackHoleAddr accepts connections and never answers, like a hung broker.
func blackHoleAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return l.Addr().String()
}

func TestPublishUnreachableReturnsUnavailable(t *testing.T) {
	tests := []struct {
		name string
		addr func(*testing.T) string
	}{
		{"connection refused", refusedAddr},
		{"broker hangs", blackHoleAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.addr(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			c, err := kafka.New(ctx, "ns/down", kafka.WithSeedBrokers(addr))
			if err != nil {
				t.Fatalf("New must not fail on an unreachable cluster: %v", err)
			}
			if d := time.Since(start); d > 20*time.Second { // bounds a hang
				t.Errorf("New took %v with a 1s context", d)
			}
			k, err := c.Consume(context.Background(), "sub")
			if err != nil {
				t.Fatal(err)
			}
			for _, deadline := range []time.Duration{500 * time.Millisecond, 2 * time.Second} {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				err := c.Publish(ctx, []channel.Envelope{{Event: ev("x"), Subscriptions: []string{"sub"}}})
				took := time.Since(start)
				cancel()
				if !errors.Is(err, channel.ErrUnavailable) {
					t.Fatalf("Publish error %v, want ErrUnavailable", err)
				}
				if took > deadline+20*time.Second { // bounds a hang
					t.Errorf("Publish with a %v deadline took %v", deadline, took)
				}
				// What the sender is told names neither the broker's address nor the topic
				// (the topic is created on the first publish, which is where this fails).
				if r := channel.Reason(err); r != "Kafka is unreachable or refused the channel's topic" {
					t.Errorf("Reason %q, want the topic's reason", r)
				}
				t.Logf("deadline %v: %v after %v", deadline, err, took)
			}
			channeltest.ExpectNothing(t, k, 200*time.Millisecond)
			done := make(chan struct{})
			go func() { _ = c.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Close hangs on an unreachable cluster")
			}
		})
	}
}

// TestLenCountsOnlyThisSubscription: records routed to other subscriptions do not count
// once the consumer has read past them, so draining an idle trigger ends at once.
func TestLenCountsOnlyThisSubscription(t *testing.T) {
	c, _ := newChannel(t)
	k, err := c.Consume(channeltest.Ctx(t, 30*time.Second), "mine")
	if err != nil {
		t.Fatal(err)
	}
	var others, mine []*event.Event
	for i := 0; i < 10; i++ {
		others = append(others, ev("o"+strconv.Itoa(i)))
	}
	for i := 0; i < 5; i++ {
		mine = append(mine, ev("m"+strconv.Itoa(i)))
	}
	channeltest.Publish(t, c, []string{"other"}, others...)
	channeltest.Publish(t, c, []string{"mine"}, mine...)
	sluicetest.Eventually(t, 20*time.Second, "Len() == 5", func() bool { return k.Len() == 5 })
	for _, m := range channeltest.ReceiveN(t, k, 5, 20*time.Second) {
		_ = m.Ack()
	}
	sluicetest.Eventually(t, 20*time.Second, "Len() == 0", func() bool { return k.Len() == 0 })
}

// TestRemoveKeepsSharedGroup: two replicas of one broker share a subscription's group;
// one removes the subscription (its trigger left its configuration) while the other still
// has it: the group stays and the other keeps receiving; the last replica's Remove
// deletes the group. Each replica's consumer reports Joined once the group gave it its
// share.
func TestRemoveKeepsSharedGroup(t *testing.T) {
	a, brokers := newChannel(t)
	prefix := strings.TrimSuffix(a.Topic(), ".ns.broker")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := kafka.New(ctx, "ns/broker", kafka.WithSeedBrokers(brokers...), kafka.WithTopicPrefix(prefix),
		kafka.WithCommitInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ka, err := a.Consume(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.Consume(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	group := a.Topic() + "/shared"
	members := func() int {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return -1
		}
		return len(gs[group].Members)
	}
	sluicetest.Eventually(t, 30*time.Second, "both replicas joined the group", func() bool {
		return ka.(channel.Joiner).Joined() && kb.(channel.Joiner).Joined() && members() == 2
	})
	if err := a.Remove(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	if n := members(); n != 1 {
		t.Fatalf("after one replica removed the subscription the group has %d members, want 1 (kept)", n)
	}
	if err := a.Publish(ctx, []channel.Envelope{{Event: ev("after-remove"), Subscriptions: []string{"shared"}}}); err != nil {
		t.Fatal(err)
	}
	if id := channeltest.ReceiveN(t, kb, 1, 30*time.Second)[0].Event().ID; id != "after-remove" {
		t.Fatalf("the replica that kept the subscription got %s", id)
	}
	if err := b.Remove(ctx, "shared"); err != nil {
		t.Fatal(err)
	}
	gs, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gs[group+"/removed"]; !ok {
		t.Errorf("group %s/removed not listed after the last replica removed the subscription (its group is kept, for a re-created trigger to resume)", group)
	}
}
