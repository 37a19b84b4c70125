package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// startingChannel is a memory channel that can start in the past (channel.Starter): it
// keeps the StartFrom each subscription was opened with. Publish holds an event whose
// id is "slow" until gate is closed.
type startingChannel struct {
	*memory.Channel
	gate    chan struct{}
	holding chan struct{} // closed once the slow event waits at the gate

	mu   sync.Mutex
	from map[string]channel.StartFrom
}

func (c *startingChannel) ConsumeFrom(ctx context.Context, name string, from channel.StartFrom) (channel.Consumer, error) {
	c.mu.Lock()
	c.from[name] = from
	c.mu.Unlock()
	return c.Consume(ctx, name)
}

func (c *startingChannel) Publish(ctx context.Context, envs []channel.Envelope) error {
	for _, e := range envs {
		if e.Event.ID == "slow" {
			close(c.holding)
			<-c.gate
		}
	}
	return c.Channel.Publish(ctx, envs)
}

func (c *startingChannel) routed(name string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.from[name].Routed
}

// TestRoutedAfterOldRoutesStored: a trigger a reload adds is told it is routed
// (StartFrom.Routed) only once every event routed by an index of before the reload is
// stored, also when another reload came in between: its catch-up must end past those,
// which it was not routed.
func TestRoutedAfterOldRoutesStored(t *testing.T) {
	for _, between := range []int{0, 1} {
		t.Run(fmt.Sprintf("%d reloads between", between), func(t *testing.T) {
			ch := &startingChannel{Channel: memory.New(), gate: make(chan struct{}), holding: make(chan struct{}), from: map[string]channel.StartFrom{}}
			open := func(context.Context, config.Broker) (channel.Channel, error) { return ch, nil }
			s := newTestServer(t, nil, WithChannelOpener(open))
			sub := newSubscriber(t)
			defer sub.Close()
			docs := plainBroker() + triggerDoc("a", "t", sub.URL)
			if err := s.Apply(context.Background(), loadConfig(t, docs)); err != nil {
				t.Fatal(err)
			}
			h := s.Handler()
			release := sync.OnceFunc(func() { close(ch.gate) })
			defer release() // before the server's shutdown, which waits for the slow request
			answered := make(chan int, 1)
			go func() { answered <- post(h, "POST", "/ns/b", binary("slow"), `{}`).Code }()
			<-ch.holding // routed by the index that has only a, not yet stored
			for i := range between {
				docs += triggerDoc(fmt.Sprintf("mid%d", i), "t", sub.URL)
				if err := s.Apply(context.Background(), loadConfig(t, docs)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Apply(context.Background(), loadConfig(t, docs+triggerDoc("late", "t", sub.URL))); err != nil {
				t.Fatal(err)
			}
			routed := ch.routed("ns/late")
			if routed == nil {
				t.Fatal("trigger late was opened without StartFrom.Routed")
			}
			select {
			case <-routed:
				t.Fatal("trigger late was told it is routed while an event an older index routed was not stored yet")
			case <-time.After(200 * time.Millisecond):
			}
			release()
			if code := <-answered; code != 202 {
				t.Fatalf("the slow event: %d, want 202", code)
			}
			sluicetest.Eventually(t, 10*time.Second, "late told it is routed", func() bool {
				select {
				case <-routed:
					return true
				default:
					return false
				}
			})
		})
	}
}
