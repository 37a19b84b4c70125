package config

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"

	"github.com/sluice-broker/sluice/filter"
)

// The Knative API shapes Sluice reads. Field names are Knative's; a field absent here is
// an unknown field and a load error (see checkFields).

const (
	apiEventing        = "eventing.knative.dev/v1"
	apiMessaging       = "messaging.knative.dev/v1"
	apiMessagingBeta   = "messaging.knative.dev/v1beta1"
	kindBroker         = "Broker"
	kindTrigger        = "Trigger"
	kindChannel        = "Channel"
	kindInMemory       = "InMemoryChannel"
	kindKafkaChannel   = "KafkaChannel"
	kindSubscription   = "Subscription"
	annotationChannel  = "sluice.dev/channel"
	annotationStream   = "sluice.dev/kinesis-stream"
	annotationOrdering = "kafka.eventing.knative.dev/delivery.order"
)

// kinds maps a kind to its apiVersion and spec type.
var kinds = map[string]struct {
	apiVersion string
	spec       reflect.Type
}{
	kindBroker:       {apiEventing, reflect.TypeFor[brokerSpec]()},
	kindTrigger:      {apiEventing, reflect.TypeFor[triggerSpec]()},
	kindChannel:      {apiMessaging, reflect.TypeFor[channelSpec]()},
	kindInMemory:     {apiMessaging, reflect.TypeFor[inMemoryChannelSpec]()},
	kindKafkaChannel: {apiMessagingBeta, reflect.TypeFor[kafkaChannelSpec]()},
	kindSubscription: {apiMessaging, reflect.TypeFor[subscriptionSpec]()},
}

// object is one document: a Kubernetes object. Any status is accepted and ignored.
type object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   objectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	Status     json.RawMessage `json:"status"`
}

// objectMeta holds the metadata Sluice uses; other metadata (labels, uid…) is accepted
// and ignored.
type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Annotations map[string]string `json:"annotations"`
}

// destination is Knative's duck Destination.
type destination struct {
	URI string          `json:"uri"`
	Ref json.RawMessage `json:"ref"`
}

type deliverySpec struct {
	DeadLetterSink *destination `json:"deadLetterSink"`
	Retry          *int         `json:"retry"`
	BackoffPolicy  *string      `json:"backoffPolicy"`
	BackoffDelay   *string      `json:"backoffDelay"`
	Timeout        *string      `json:"timeout"`
	RetryAfterMax  *string      `json:"retryAfterMax"`
}

type brokerSpec struct {
	Config   json.RawMessage `json:"config"`
	Delivery *deliverySpec   `json:"delivery"`
}

type triggerFilter struct {
	Attributes map[string]string `json:"attributes"`
}

type triggerSpec struct {
	Broker     string         `json:"broker"`
	Filter     *triggerFilter `json:"filter"`
	Filters    []filter.Spec  `json:"filters"`
	Subscriber *destination   `json:"subscriber"`
	Delivery   *deliverySpec  `json:"delivery"`
}

type channelTemplate struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec"`
}

type channelSpec struct {
	ChannelTemplate *channelTemplate `json:"channelTemplate"`
	Delivery        *deliverySpec    `json:"delivery"`
}

type inMemoryChannelSpec struct {
	Delivery *deliverySpec `json:"delivery"`
}

// kafkaTopicSpec is the part of a KafkaChannel's spec a Channel's channelTemplate may
// set.
type kafkaTopicSpec struct {
	NumPartitions     int `json:"numPartitions"`
	ReplicationFactor int `json:"replicationFactor"`
}

type kafkaChannelSpec struct {
	NumPartitions     int           `json:"numPartitions"`
	ReplicationFactor int           `json:"replicationFactor"`
	Delivery          *deliverySpec `json:"delivery"`
}

type channelRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
}

type subscriptionSpec struct {
	Channel    *channelRef   `json:"channel"`
	Subscriber *destination  `json:"subscriber"`
	Reply      *destination  `json:"reply"`
	Delivery   *deliverySpec `json:"delivery"`
}

// checkFields reports, through add, every key of the decoded JSON value v that the Go
// type t has no json field for, with its path. json.RawMessage fields accept anything
// (their content is checked where it is used).
func checkFields(path string, v any, t reflect.Type, add func(path, reason string)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return // a type error, reported by json.Unmarshal
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			fields[name] = t.Field(i).Type
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				add(join(path, k), "unknown field")
				continue
			}
			checkFields(join(path, k), m[k], ft, add)
		}
	case reflect.Slice:
		if s, ok := v.([]any); ok {
			for i, e := range s {
				checkFields(path+"["+itoa(i)+"]", e, t.Elem(), add)
			}
		}
	case reflect.Map:
		if m, ok := v.(map[string]any); ok {
			for k, e := range m {
				checkFields(join(path, k), e, t.Elem(), add)
			}
		}
	}
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
