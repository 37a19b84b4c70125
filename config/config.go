// Package config loads Sluice's configuration: multi-document YAML of Knative Eventing
// objects (Broker, Trigger, Channel, InMemoryChannel, KafkaChannel,
// NatsJetStreamChannel, Subscription, Sequence, Parallel, PingSource, and the ConfigMaps
// they name), unchanged, validated strictly and resolved into the brokers, triggers and
// sources the server runs.
// docs/config.md is the user documentation of the format.
//
// Each object stands alone, as in Knative: Read reports every object with whether it is
// ready and why not, and the ready ones make up the configuration. Kinds Sluice does not
// run (a Deployment, a Namespace…) are skipped. Everything Sluice cannot honour — an
// unknown field, a broker class it has no backend for — makes that object not ready with
// a reason naming the field; nothing is silently changed. References (spec.subscriber.ref
// and every other Destination) resolve to the referenced object's Sluice address, an
// entry of a refs file, or the in-cluster address Knative would use (see Option).
//
// This package names the backends (Broker.Channel, one of the Channel* values) but
// does not interpret their settings: what a backend reads of an object — a Kafka broker's ConfigMap keys, a
// KafkaChannel's numPartitions, the sluice.dev/kinesis-stream annotation — is collected
// into Broker.Settings unparsed, keyed by the field it was written in, after the checks
// Knative's schema of the object makes (a ConfigMap key Sluice does not know, a negative
// numPartitions). The backend's entry in channel/registry parses and checks the
// settings when it opens the broker's channel; its error, naming the key, makes the
// broker not ready.
//
// The values returned are never modified by this package after they are returned and
// may be shared between goroutines.
package config

import (
	"errors"
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
	ChannelRabbitMQ  = "rabbitmq"
)

// channels returns the backends' names, the values sluice.dev/channel may take.
func channels() []string {
	return []string{ChannelMemory, ChannelJetStream, ChannelKafka, ChannelKinesis, ChannelRabbitMQ}
}

// Header encodings, the values of Broker.HeaderEncoding.
const (
	HeaderEncodingMinimal = ""
	HeaderEncodingPercent = "percent"
)

// Backoff policies, the values of Delivery.BackoffPolicy.
const (
	BackoffLinear      = "linear"
	BackoffExponential = "exponential"
)

// Event formats, the values of Delivery.Format (Knative's DeliverySpec format).
const (
	FormatBinary = "binary"
	FormatJSON   = "json"
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
	// way, and their Subscriptions are their triggers. The channels and subscriptions a
	// Sequence or Parallel is made of are here too (Broker.Owner names it).
	Brokers []Broker
	// PingSources are the ready PingSources, sorted by Key.
	PingSources []PingSource
	// EventPolicies are the ready EventPolicies, sorted by Key.
	EventPolicies []EventPolicy
	// InvalidEventPolicies are the EventPolicies that are not ready, in file order, each
	// with its Invalid reason. An invalid policy lets no one in, yet still applies to what
	// it names, so that a broken policy denies instead of leaving its targets to the
	// default mode: its To when its spec.to was read without error; otherwise (spec.to
	// at fault, or an object that could not be read as an EventPolicy at all) every
	// broker and channel of its namespace, with To empty. On a reload the last good
	// version of the policy, if there is one, is in EventPolicies too and still lets in
	// whom it let in.
	InvalidEventPolicies []EventPolicy
	// Objects is every object read, in file order, with its status: ready, skipped (a
	// kind Sluice does not run) or not ready with the reason.
	Objects []ObjectStatus
	// Files are the files read, in the order read.
	Files []string

	// good holds the last valid version of each object, so that a reload in which an
	// object became invalid keeps running that version (see WithPrevious).
	good map[string]*parsed
}

// Ready reports whether every object that Sluice runs is ready.
func (c *Config) Ready() bool {
	for _, o := range c.Objects {
		if !o.Ready && !o.Skipped {
			return false
		}
	}
	return true
}

// Err returns the reasons of every object that is not ready, one error each naming the
// file and the object ("demo.yaml: Trigger demo/perf: spec.broker: required"), joined;
// nil when every object is ready.
func (c *Config) Err() error {
	var errs []error
	for _, o := range c.Objects {
		if o.Ready || o.Skipped {
			continue
		}
		if len(o.reasons) == 0 {
			errs = append(errs, errors.New(o.where()+": "+o.Reason))
		}
		for _, r := range o.reasons {
			errs = append(errs, errors.New(o.where()+": "+r))
		}
	}
	return errors.Join(errs...)
}

// Broker is a Knative Broker or channel: an ingress address, a channel backend and the
// triggers fed from it.
type Broker struct {
	Namespace, Name string
	// Kind is the object's kind: "Broker", "Channel", "InMemoryChannel",
	// "KafkaChannel" or "NatsJetStreamChannel".
	Kind string
	// Channel is the backend: ChannelDefault, ChannelMemory, ChannelJetStream,
	// ChannelKafka, ChannelKinesis or ChannelRabbitMQ.
	Channel string
	// Class is the Knative broker class the Broker runs as: "Sluice",
	// "MTChannelBasedBroker", "Kafka", "KafkaNamespaced", "NatsJetStreamBroker" or
	// "RabbitMQBroker"; empty for channels.
	Class string
	// Settings are what the backend reads of the object, as written (see Settings);
	// nil when there is none.
	Settings Settings
	// HeaderEncoding is how ce- header values are encoded toward the broker's subscribers:
	// HeaderEncodingMinimal (the default) or HeaderEncodingPercent (the
	// sluice.dev/header-encoding annotation).
	HeaderEncoding string
	// Owner names the Sequence or Parallel a generated channel belongs to, "Kind ns/name";
	// empty for objects of the configuration.
	Owner string
	// Triggers fed from this broker, sorted by Key.
	Triggers []Trigger
	// Labels are the object's metadata.labels (EventPolicy selectors match them).
	Labels map[string]string
	// MaxRate is the ingress rate in events a second beyond which the broker answers
	// 429 (the sluice.dev/max-rate annotation); 0 means no limit.
	MaxRate float64
	// DedupWindow is how long an event's (source, id) is remembered once accepted: a
	// second event with the same pair within it is answered 202 and not stored again
	// (the sluice.dev/dedup-window annotation); 0 means off.
	DedupWindow time.Duration
	// Retention is how long the broker's durable channel keeps events once stored,
	// delivered or not, for replay (the sluice.dev/retention annotation); 0 leaves the
	// backend's own retention.
	Retention time.Duration
}

// Settings are a broker's or channel's backend settings, opaque to this package: it
// collects them from where Knative puts them, checks them against the schema of the
// object they are in (a ConfigMap's keys, a KafkaChannel's spec), and hands them over
// unparsed; the backend's entry in channel/registry parses them when it opens the
// channel, and its errors name the key. Each key is the field the value was written in,
// as a not-ready reason names it; each value is its text:
//
//   - metadata.annotations.<name>: a backend's annotation on the object
//     (sluice.dev/kinesis-stream, kafka.eventing.knative.dev/external.topic);
//   - data.<key>: a key of the ConfigMap of a broker whose class names its backend
//     (a Kafka broker's bootstrap.servers, default.topic.partitions, ...);
//   - spec.<field>: a channel's spec field the backend reads (a KafkaChannel's
//     numPartitions and replicationFactor, also from a channel template or
//     default-ch-webhook), present only when set.
//
// Adding a backend needs nothing here but its name among the Channel* values, and,
// when it reads an annotation, that annotation's name in the list of backend
// annotations (objects.go).
type Settings map[string]string

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
	// Subscriber is the absolute http or https URL events are sent to: spec.subscriber
	// resolved (a ref becomes the URL of the object it names).
	Subscriber string
	// SubscriberCACerts are the PEM CA certificates an https Subscriber is verified
	// against (spec.subscriber.CACerts); empty: the system's.
	SubscriberCACerts string
	// SubscriberAudience is spec.subscriber.audience: an OIDC token for it is sent as
	// Authorization: Bearer. Empty: none.
	SubscriberAudience string
	// Reply is a Subscription's resolved spec.reply: where the subscriber's replies are
	// sent. Empty means: into the broker (for a Trigger), dropped (for a Subscription).
	Reply string
	// Delivery is the resolved retry, timeout and dead-letter policy.
	Delivery Delivery
	// Ordered is set by the annotation kafka.eventing.knative.dev/delivery.order: ordered.
	Ordered bool
	// Batch, above 1, delivers up to Batch events per POST as a batch (annotation
	// sluice.dev/delivery-batch); BatchWait is how long a batch may wait to fill
	// (sluice.dev/delivery-batch-wait, an ISO-8601 duration; 0: the default, 5 ms).
	Batch     int
	BatchWait time.Duration
	// Caps are the trigger's own delivery caps (sluice.dev/max-delivery-rate and
	// sluice.dev/max-in-flight); the zero value: none.
	Caps Caps
	// Paused stops the trigger's deliveries while its events keep being stored (the
	// sluice.dev/paused annotation: "true").
	Paused bool
	// StartFrom is where the trigger starts when it is new to its channel (the
	// sluice.dev/start-from annotation); a running trigger is not moved by a change.
	StartFrom StartFrom
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
		t.SubscriberCACerts == u.SubscriberCACerts && t.SubscriberAudience == u.SubscriberAudience &&
		t.Ordered == u.Ordered && t.Batch == u.Batch && t.BatchWait == u.BatchWait && t.Caps == u.Caps && t.Paused == u.Paused &&
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
	// DeadLetterSinkCACerts and DeadLetterSinkAudience are the sink's CACerts (PEM)
	// and audience, as for a Trigger's subscriber.
	DeadLetterSinkCACerts, DeadLetterSinkAudience string
	// Format is the event format deliveries use: FormatBinary (ce- headers, the
	// default; "" means it too) or FormatJSON (structured mode: the event as JSON).
	Format string
}

// Default returns the configuration used without a config file: one Broker
// default/default on the server's default channel, with no triggers.
func Default() *Config {
	return &Config{
		Brokers: []Broker{{Namespace: "default", Name: "default", Kind: kindBroker}},
		Objects: []ObjectStatus{{APIVersion: apiEventing, Kind: kindBroker, Namespace: "default", Name: "default",
			File: "(default)", Ready: true}},
	}
}

// PingSource is a Knative PingSource, resolved: it posts one event to Sink on every tick
// of Schedule.
type PingSource struct {
	Namespace, Name string
	// Schedule is the cron schedule (five fields, or a descriptor such as @hourly), with a
	// "CRON_TZ=<zone> " prefix when spec.timezone or the schedule names a time zone.
	Schedule string
	// ContentType is the event's datacontenttype (spec.contentType).
	ContentType string
	// Data is the event's data: spec.data as is, or spec.dataBase64 decoded.
	Data []byte
	// Extensions are spec.ceOverrides.extensions, added to every event.
	Extensions map[string]string
	// Sink is the resolved spec.sink URL.
	Sink string
	// Source is the file the object was read from.
	Source string
}

// Key returns "namespace/name".
func (p PingSource) Key() string { return p.Namespace + "/" + p.Name }

// EventSource is the CloudEvents source attribute of the PingSource's events, as
// Knative sets it: "/apis/v1/namespaces/<namespace>/pingsources/<name>".
func (p PingSource) EventSource() string {
	return "/apis/v1/namespaces/" + p.Namespace + "/pingsources/" + p.Name
}

// Equal reports whether p and q describe the same source (Source, the file, aside).
func (p PingSource) Equal(q PingSource) bool {
	return p.Namespace == q.Namespace && p.Name == q.Name && p.Schedule == q.Schedule &&
		p.ContentType == q.ContentType && string(p.Data) == string(q.Data) && p.Sink == q.Sink &&
		equalMaps(p.Extensions, q.Extensions)
}
