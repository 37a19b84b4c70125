package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
	"github.com/sluice-broker/sluice/config"
)

// TestOpenRabbitMQ opens rabbitmq channels on the real RabbitMQ of SLUICE_RABBITMQ_URL:
// durable, checked, and on the vhost a RabbitmqBrokerConfig names (a vhost the node does
// not have leaves the channel unreachable, which Check says).
func TestOpenRabbitMQ(t *testing.T) {
	r, err := started(t, []string{"--rabbitmq-url", rabbitmqtest.URL(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		settings config.Settings
		ok       bool
	}{
		{"defaults", nil, true},
		{"classic on the default vhost", config.Settings{keyRabbitQueueType: "classic", keyRabbitVhost: "/"}, true},
		{"a vhost the node lacks", config.Settings{keyRabbitVhost: "no-such-vhost"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := broker("rabbit-"+t.Name(), config.ChannelRabbitMQ)
			b.Settings = tt.settings
			ch, err := r.Open(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			if !channel.IsDurable(ch) {
				t.Error("not durable")
			}
			err = ch.(channel.Checker).Check(context.Background())
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, channel.ErrUnavailable)) {
				t.Fatalf("Check = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
