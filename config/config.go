// Package config loads Sluice's configuration: multi-document YAML of Knative Eventing
// objects (Broker, Trigger, Channel, InMemoryChannel, KafkaChannel, Subscription),
// unchanged, validated strictly and resolved into the brokers and triggers the server
// runs. docs/config.md is the user documentation of the format.
//
// Everything Sluice cannot honour outside Kubernetes — an unknown kind or field, a ref
// destination, a Broker's spec.config — is a load error naming the file, the object and
// the field; nothing is silently ignored. Load reports every error it finds at once.
//
// The values returned are never modified by this package after they are returned and
// may be shared between goroutines.
package config

import (
	"reflect"
	"time"

	"github.com/sluice-broker/sluice/filter"
)

// Channel backends, the values of Broker.Channel. The empty string means the server's
// default backend.
const (
	ChannelDefault   = ""
	ChannelMemory    = "memory"
	ChannelJetStream = "jetstream"
	ChannelKafka     = "kafka"
	ChannelKinesis   = "kinesis"
)

// Backoff policies, the values of Delivery.BackoffPolicy.
const (
	BackoffLinear      = "linear"
	BackoffExponential = "exponential"
)

// DefaultDelivery returns the delivery used for every field that neither a Trigger (or
// Subscription) nor its Broker (or Channel) sets: 3 retries (4 attempts) with
// exponential backoff from 200 ms, a 10 s timeout per attempt (delivery.DefaultTimeout
// is the same), Retry-After honoured up to 30 s, and no dead-letter sink.
func DefaultDelivery() Delivery {
	return Delivery{
		Retry:         3,
		BackoffPolicy: BackoffExponential,
		BackoffDelay:  200 * time.Millisecond,
		Timeout:       10 * time.Second,
		RetryAfterMax: 30 * time.Second,
	}
}

// Config is a loaded, validated configuration.
type Config struct {
	// Brokers, sorted by Key. Channels are brokers too: events are posted to them the same
	// way, and their Subscriptions are their triggers.
	Brokers []Broker
	// Files are the files read, in the order read.
	Files []string
}

// Broker is a Knative Broker or channel: an ingress address, a channel backend and the
// triggers fed from it.
type Broker struct {
	Namespace, Name string
	// Kind is the object's kind: "Broker", "Channel", "InMemoryChannel" or
	// "KafkaChannel".
	Kind string
	// Channel is the backend: ChannelDefault, ChannelMemory, ChannelJetStream,
	// ChannelKafka or ChannelKinesis.
	Channel string
	// KinesisStream names an existing Kinesis stream the broker uses as it is (the
	// sluice.dev/kinesis-stream annotation); empty: the stream Sluice names and creates.
	KinesisStream string
	// Partitions and ReplicationFactor are a KafkaChannel's topic settings; 0 means the
	// backend's default.
	Partitions, ReplicationFactor int
	// Triggers fed from this broker, sorted by Key.
	Triggers []Trigger
}

// Key returns "namespace/name", which is also the ingress path without its leading
// slash.
func (b Broker) Key() string { return b.Namespace + "/" + b.Name }

// Trigger is a Knative Trigger, or a Subscription to a channel (a trigger with no filter),
// resolved: delivery filled in from the broker's and the defaults.
type Trigger struct {
	Namespace, Name string
	// Kind is "Trigger" or "Subscription".
	Kind string
	// Filter decides which events the subscriber receives; filter.MatchAll without one.
	Filter filter.Filter
	// Attributes and Filters are the spec the Filter was compiled from (spec.filter.
	// attributes and spec.filters), kept to compare triggers across reloads.
	Attributes map[string]string
	Filters    []filter.Spec
	// Subscriber is the absolute http or https URL events are sent to.
	Subscriber string
	// Reply is a Subscription's spec.reply.uri: where the subscriber's replies are sent.
	// Empty means replies are ingested back into the broker or channel.
	Reply string
	// Delivery is the resolved retry, timeout and dead-letter policy.
	Delivery Delivery
	// Ordered is set by the annotation kafka.eventing.knative.dev/delivery.order: ordered.
	Ordered bool
	// Source is the file the object was read from.
	Source string
}

// Key returns "namespace/name" (for a Subscription, the subscription's name).
func (t Trigger) Key() string { return t.Namespace + "/" + t.Name }

// Equal reports whether t and u describe the same trigger: all fields equal, filters
// compared by their spec. Source (the file) is not compared, so moving an object to
// another file does not change it.
func (t Trigger) Equal(u Trigger) bool {
	return t.Namespace == u.Namespace && t.Name == u.Name && t.Kind == u.Kind &&
		t.Subscriber == u.Subscriber && t.Reply == u.Reply && t.Delivery == u.Delivery &&
		t.Ordered == u.Ordered &&
		equalMaps(t.Attributes, u.Attributes) && reflect.DeepEqual(normSpecs(t.Filters), normSpecs(u.Filters))
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// normSpecs treats nil and empty lists alike.
func normSpecs(s []filter.Spec) []filter.Spec {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Delivery is a resolved Knative DeliverySpec. docs/delivery.md ("Retry timing") says how
// Retry, BackoffPolicy, BackoffDelay and RetryAfterMax are applied.
type Delivery struct {
	// Retry is the number of retries after the first attempt.
	Retry int
	// BackoffPolicy is BackoffLinear or BackoffExponential.
	BackoffPolicy string
	// BackoffDelay is the base wait before a retry.
	BackoffDelay time.Duration
	// Timeout bounds each attempt.
	Timeout time.Duration
	// RetryAfterMax caps the wait a subscriber's Retry-After header may ask for.
	RetryAfterMax time.Duration
	// DeadLetterSink is the URL events go to when every attempt failed; empty for none.
	DeadLetterSink string
}

// Default returns the configuration used without a config file: one Broker
// default/default on the server's default channel, with no triggers.
func Default() *Config {
	return &Config{Brokers: []Broker{{Namespace: "default", Name: "default", Kind: kindBroker}}}
}
