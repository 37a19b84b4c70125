package broker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// joiningChannel is a memory channel whose consumers join their subscription only when
// the test says so, as a Kafka consumer group member joins some time after Consume.
type joiningChannel struct {
	channel.Channel
	joined *atomic.Bool
}

type joiningConsumer struct {
	channel.Consumer
	joined *atomic.Bool
}

func (c joiningChannel) Consume(ctx context.Context, name string) (channel.Consumer, error) {
	k, err := c.Channel.Consume(ctx, name)
	if err != nil {
		return nil, err
	}
	return joiningConsumer{k, c.joined}, nil
}

func (k joiningConsumer) Joined() bool { return k.joined.Load() }

// TestReadyzWaitsForJoin: /readyz answers 503, naming the trigger, until every
// trigger's consumer has joined its subscription (channel.Joiner); then 200.
func TestReadyzWaitsForJoin(t *testing.T) {
	var joined atomic.Bool
	budget := memory.NewBudget(1 << 20)
	s := newTestServer(t, budget, WithChannelOpener(func(_ context.Context, b config.Broker) (channel.Channel, error) {
		return joiningChannel{memory.New(memory.WithBudget(budget)), &joined}, nil
	}))
	if err := s.Apply(context.Background(), loadConfig(t, plainBroker()+triggerDoc("all", "t", "http://127.0.0.1:1"))); err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	rec := post(h, "GET", "/readyz", nil, "")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "trigger ns/all has not joined") {
		t.Errorf("readyz before the join: %d %q, want 503 naming trigger ns/all", rec.Code, rec.Body)
	}
	joined.Store(true)
	if rec := post(h, "GET", "/readyz", nil, ""); rec.Code != 200 {
		t.Errorf("readyz after the join: %d %q, want 200", rec.Code, rec.Body)
	}
}
