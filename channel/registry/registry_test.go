package registry

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// started returns a registry whose flags were parsed from args and that was started
// with opts, or the error of either step; a started registry is closed when the test
// ends.
func started(t *testing.T, args []string, opts ...Option) (*Registry, error) {
	t.Helper()
	r := New()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	r.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := r.Start(context.Background(), opts...); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r, nil
}

func TestStartChecksFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		opts []Option
		want string // "" = starts
	}{
		{"defaults", nil, nil, ""},
		{"memory", []string{"--channel", "memory"}, nil, ""},
		{"unknown", []string{"--channel", "rabbit"}, nil, `--channel "rabbit": unknown channel backend; known: memory, jetstream, kafka`},
		{"kafka unconfigured", []string{"--channel", "kafka"}, nil, "--channel kafka needs --kafka-brokers HOST:PORT[,HOST:PORT]"},
		{"jetstream unconfigured", []string{"--channel", "jetstream"}, nil, "--channel jetstream needs --data-dir DIR (embedded NATS server) or --nats-url URL"},
		{"jetstream both", []string{"--data-dir", "/nonexistent", "--nats-url", "nats://127.0.0.1:1"}, nil, "not both"},
		{"bad size", []string{"--jetstream-max-bytes", "0"}, nil, "not a positive size"},
		{"jetstream replicas embedded", []string{"--data-dir", "/nonexistent", "--jetstream-replicas", "3"}, nil, "--jetstream-replicas 3: the embedded server is one node; replicas need --nats-url"},
		{"jetstream replicas range", []string{"--jetstream-replicas", "7"}, nil, "--jetstream-replicas 7: want 1 to 5"},
		{"kafka partitions", []string{"--kafka-partitions", "0"}, nil, "--kafka-partitions 0: want at least 1"},
		{"kafka replication", []string{"--kafka-replication-factor", "-1"}, nil, "--kafka-replication-factor -1: want at least 1"},
		{"rabbitmq unconfigured", []string{"--channel", "rabbitmq"}, nil, "--channel rabbitmq needs --rabbitmq-url URL"},
		{"rabbitmq bad url", []string{"--rabbitmq-url", "http://x"}, nil, "--rabbitmq-url: AMQP scheme must be either 'amqp://' or 'amqps://'"},
		{"rabbitmq prefetch", []string{"--rabbitmq-url", "amqp://127.0.0.1:1/", "--rabbitmq-prefetch", "70000"}, nil, "--rabbitmq-prefetch 70000: want 1 to 65535"},
		{"rabbitmq dlq bound", []string{"--rabbitmq-url", "amqp://127.0.0.1:1/", "--rabbitmq-dlq-max-bytes", "1KiB"}, nil, "--rabbitmq-dlq-max-bytes 1024: want at least 1048576 (1MiB)"},
		{"kinesis unconfigured", []string{"--channel", "kinesis"}, nil, "--channel kinesis needs --kinesis-checkpoint-dir DIR or --kinesis-lease-table NAME"},
		{"kinesis lease duration", []string{"--kinesis-lease-table", "t", "--kinesis-region", "us-east-1", "--kinesis-lease-duration", "500ms"}, nil, "--kinesis-lease-duration 500ms: want at least 1s"},
		{"kinesis lease table", []string{"--channel", "kinesis", "--kinesis-lease-table", "t", "--kinesis-region", "us-east-1"}, nil, ""},
		{"bad memory limit", nil, []Option{WithMemoryLimit(0)}, "WithMemoryLimit(0): want > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := started(t, tt.args, tt.opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Start: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func broker(name, backend string) config.Broker {
	return config.Broker{Namespace: "ns", Name: name, Channel: backend}
}

// TestOpenMemory opens memory channels for brokers naming it or none: they share one
// budget, reported as sluice_queue_bytes, are not durable, and admit what fits. Brokers
// naming an unknown or unconfigured backend get an error saying what is needed.
func TestOpenMemory(t *testing.T) {
	prom := prometheus.NewRegistry()
	r, err := started(t, nil, WithRegisterer(prom), WithMemoryLimit(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := r.Open(ctx, broker("a", config.ChannelDefault))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := r.Open(ctx, broker("b", config.ChannelMemory))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if channel.IsDurable(a) {
		t.Error("a memory channel reports durable")
	}
	if _, err := a.Consume(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
	e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: make([]byte, 600<<10)}
	if err := a.Publish(ctx, []channel.Envelope{{Event: e, Subscriptions: []string{"sub"}}}); err != nil {
		t.Fatal(err)
	}
	if adm, ok := b.(channel.Admitter); !ok || adm.Admits(600<<10) {
		t.Error("b admits 600 KiB more although a holds 600 KiB of their shared 1 MiB")
	}
	used, limit := sluicetest.Gather(t, prom, "sluice_queue_bytes"), sluicetest.Gather(t, prom, "sluice_queue_bytes_limit")
	if used[""] < 600<<10 || limit[""] != 1<<20 || len(used) != 1 || len(limit) != 1 {
		t.Errorf("budget metrics: sluice_queue_bytes %v, sluice_queue_bytes_limit %v; want one unlabelled series each, ≥ 600 KiB of 1 MiB", used, limit)
	}

	for _, tt := range []struct{ backend, want string }{
		{"rabbit", `channel backend "rabbit": unknown channel backend; known: memory, jetstream, kafka`},
		{config.ChannelKafka, "the kafka channel needs --kafka-brokers HOST:PORT[,HOST:PORT]"},
		{config.ChannelJetStream, "the jetstream channel needs --data-dir DIR"},
	} {
		if _, err := r.Open(ctx, broker("x", tt.backend)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%s): %v, want %q", tt.backend, err, tt.want)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open(ctx, broker("late", config.ChannelMemory)); !errors.Is(err, channel.ErrClosed) {
		t.Errorf("Open after Close: %v, want channel.ErrClosed", err)
	}
	if mfs, err := prom.Gather(); err != nil || len(mfs) != 0 {
		t.Errorf("after Close: %d metric families still registered (err %v), want none", len(mfs), err)
	}
}

// roundTrip publishes one event to ch and receives it back.
func roundTrip(t *testing.T, ch channel.Channel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := ch.Consume(ctx, "sub")
	if err != nil {
		t.Fatal(err)
	}
	e := &event.Event{SpecVersion: "1.0", ID: "rt-1", Source: "/registry", Type: "t", Data: []byte(`{}`)}
	if err := ch.Publish(ctx, []channel.Envelope{{Event: e, Subscriptions: []string{"sub"}}}); err != nil {
		t.Fatal(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Event().ID != "rt-1" {
		t.Errorf("received %q, want rt-1", m.Event().ID)
	}
	if err := m.Ack(); err != nil {
		t.Error(err)
	}
}

// TestOpenJetStream opens a durable channel on an embedded NATS server (--data-dir) as
// the default backend, and stops the server on Close.
func TestOpenJetStream(t *testing.T) {
	r, err := started(t, []string{"--channel", "jetstream", "--data-dir", t.TempDir(), "--jetstream-ack-wait", "5s"},
		WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := r.Open(context.Background(), broker("js", config.ChannelDefault))
	if err != nil {
		t.Fatal(err)
	}
	if !channel.IsDurable(ch) {
		t.Error("a jetstream channel does not report durable")
	}
	roundTrip(t, ch)
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
}

// TestOpenJetStreamMaxBytes: a broker's stream maxBytes (a NatsJetStreamChannel's
// spec.stream.config.maxBytes) bounds its stream: once it is full, Publish refuses with
// channel.ErrFull, which ingress answers 429.
func TestOpenJetStreamMaxBytes(t *testing.T) {
	r, err := started(t, []string{"--data-dir", t.TempDir()}, WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	b := broker("small", config.ChannelJetStream)
	b.Settings = config.Settings{"spec.stream.config.maxBytes": "4096"}
	ch, err := r.Open(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ch.Consume(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 512)
	stored := 0
	for i := range 64 { // 32 KiB in all: far past the bound
		e := &event.Event{SpecVersion: "1.0", ID: strconv.Itoa(i), Source: "/registry", Type: "t", Data: data}
		err := ch.Publish(ctx, []channel.Envelope{{Event: e, Subscriptions: []string{"sub"}}})
		if err != nil {
			if !errors.Is(err, channel.ErrFull) {
				t.Fatalf("event %d: %v, want channel.ErrFull", i, err)
			}
			break
		}
		stored++
	}
	if stored == 0 || stored >= 8 { // 8 events of 512 bytes of data alone fill 4096
		t.Errorf("%d events stored in a stream of 4096 bytes, want 1 to 7", stored)
	}
}

// TestOpenKafka opens a durable channel on the real Kafka of scripts/kafka.sh (skipped
// without it, failed under CI), with a KafkaChannel's partition count.
func TestOpenKafka(t *testing.T) {
	seeds := kafkatest.Brokers(t)
	r, err := started(t, []string{"--kafka-brokers", strings.Join(seeds, ",")})
	if err != nil {
		t.Fatal(err)
	}
	b := broker("registry-"+strings.ReplaceAll(t.Name(), "/", "-")+time.Now().Format("150405.000"), config.ChannelKafka)
	b.Settings = config.Settings{"spec.numPartitions": "2"}
	ch, err := r.Open(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if !channel.IsDurable(ch) {
		t.Error("a kafka channel does not report durable")
	}
	roundTrip(t, ch)
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
}

// TestStartWithoutFlags: a registry whose flags were never registered (a program that
// embeds Sluice's broker) starts with every backend's defaults.
func TestStartWithoutFlags(t *testing.T) {
	r := New()
	if err := r.Start(context.Background()); err != nil {
		t.Fatalf("Start without flags: %v", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
