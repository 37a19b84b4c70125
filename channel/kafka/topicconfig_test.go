package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
)

// TestMinInsyncReplicasOption: the option is checked against the replication factor.
func TestMinInsyncReplicasOption(t *testing.T) {
	for _, tt := range []struct {
		opts []Option
		want string // "" = valid
	}{
		{[]Option{WithMinInsyncReplicas(1)}, ""},
		{[]Option{WithReplicationFactor(3), WithMinInsyncReplicas(2)}, ""},
		{[]Option{WithMinInsyncReplicas(2)}, ""}, // replication 0: the cluster's default, unknown here
		{[]Option{WithReplicationFactor(1), WithMinInsyncReplicas(2)}, "WithMinInsyncReplicas: 2, want 0 (the cluster's setting) to the replication factor 1"},
		{[]Option{WithMinInsyncReplicas(-1)}, "WithMinInsyncReplicas: -1"},
	} {
		cfg := defaultConfig()
		cfg.brokers = []string{"127.0.0.1:1"}
		for _, o := range tt.opts {
			o(&cfg)
		}
		err := cfg.validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v", err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("err = %v, want one containing %q", err, tt.want)
		}
	}
}

// TestTopicConfigs: an explicit min.insync.replicas wins; otherwise a topic of 3 or more
// replicas gets 2, and a smaller one (or the cluster's default factor, -1) the cluster's.
func TestTopicConfigs(t *testing.T) {
	for _, tt := range []struct {
		minInsync, rf int16
		want          string // "" = no setting
	}{
		{0, -1, ""}, {0, 1, ""}, {0, 3, "2"}, {0, 5, "2"}, {1, 3, "1"}, {3, -1, "3"},
	} {
		cfg := defaultConfig()
		cfg.minInsync = tt.minInsync
		got := ""
		if v := cfg.topicConfigs(tt.rf)["min.insync.replicas"]; v != nil {
			got = *v
		}
		if got != tt.want {
			t.Errorf("minInsync %d, rf %d: min.insync.replicas %q, want %q", tt.minInsync, tt.rf, got, tt.want)
		}
	}
}

// TestMinInsyncReplicasOnTopic creates a topic with WithMinInsyncReplicas(1) on the real
// Kafka of scripts/kafka.sh and reads the setting back.
func TestMinInsyncReplicasOnTopic(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "ns/minisr" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	c, err := New(ctx, key, WithSeedBrokers(brokers...), WithMinInsyncReplicas(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.ensureTopic(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, c.topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(c.topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range rc.Configs {
		if cfg.Key == "min.insync.replicas" {
			if cfg.Value == nil || *cfg.Value != "1" || cfg.Source != kmsg.ConfigSourceDynamicTopicConfig {
				t.Errorf("min.insync.replicas = %v (source %v), want 1 set on the topic", cfg.MaybeValue(), cfg.Source)
			}
			return
		}
	}
	t.Error("min.insync.replicas not described")
}
