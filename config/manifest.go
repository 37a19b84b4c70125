package config

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-broker/sluice/filter"
)

// The Knative API shapes Sluice reads. Field names are Knative's. A field absent here is
// an unknown field; a field tagged `unsupported:"why"` is a real Knative field Sluice
// does not honour, and setting it makes the object not ready with that reason (see
// checkFields).

// API groups and kinds.
const (
	groupEventing  = "eventing.knative.dev"
	groupMessaging = "messaging.knative.dev"
	groupFlows     = "flows.knative.dev"
	groupSources   = "sources.knative.dev"

	kindBroker       = "Broker"
	kindTrigger      = "Trigger"
	kindChannel      = "Channel"
	kindInMemory     = "InMemoryChannel"
	kindKafkaChannel = "KafkaChannel"
	kindSubscription = "Subscription"
	kindSequence     = "Sequence"
	kindParallel     = "Parallel"
	kindPingSource   = "PingSource"
	kindConfigMap    = "ConfigMap"
	kindList         = "List"

	apiEventing      = groupEventing + "/v1"
	apiMessaging     = groupMessaging + "/v1"
	apiMessagingBeta = groupMessaging + "/v1beta1"
)

// Annotations Sluice reads.
const (
	annotationChannel        = "sluice.dev/channel"
	annotationStream         = "sluice.dev/kinesis-stream"
	annotationHeaderEncoding = "sluice.dev/header-encoding"
	annotationMaxRate        = "sluice.dev/max-rate"
	annotationDedupWindow    = "sluice.dev/dedup-window"
	annotationPaused         = "sluice.dev/paused"
	annotationOrdering       = "kafka.eventing.knative.dev/delivery.order"
	annotationBatch          = "sluice.dev/delivery-batch"
	annotationBatchWait      = "sluice.dev/delivery-batch-wait"
	annotationClass          = "eventing.knative.dev/broker.class"
	annotationExternalTopic  = "kafka.eventing.knative.dev/external.topic"
)

// kindInfo is what Sluice runs of one kind: its API group, the versions it reads (the
// first is the one messages suggest) and its spec type.
type kindInfo struct {
	group    string
	versions []string
	spec     reflect.Type
}

// kinds are the kinds Sluice runs. v1beta1 versions differ from v1 only in their version
// for the fields Sluice reads, and are read as v1.
var kinds = map[string]kindInfo{
	kindBroker:       {groupEventing, []string{"v1", "v1beta1"}, reflect.TypeFor[brokerSpec]()},
	kindTrigger:      {groupEventing, []string{"v1", "v1beta1"}, reflect.TypeFor[triggerSpec]()},
	kindChannel:      {groupMessaging, []string{"v1", "v1beta1"}, reflect.TypeFor[channelSpec]()},
	kindInMemory:     {groupMessaging, []string{"v1", "v1beta1"}, reflect.TypeFor[inMemoryChannelSpec]()},
	kindKafkaChannel: {groupMessaging, []string{"v1beta1"}, reflect.TypeFor[kafkaChannelSpec]()},
	kindSubscription: {groupMessaging, []string{"v1", "v1beta1"}, reflect.TypeFor[subscriptionSpec]()},
	kindSequence:     {groupFlows, []string{"v1", "v1beta1"}, reflect.TypeFor[sequenceSpec]()},
	kindParallel:     {groupFlows, []string{"v1", "v1beta1"}, reflect.TypeFor[parallelSpec]()},
	kindPingSource:   {groupSources, []string{"v1", "v1beta2"}, reflect.TypeFor[pingSourceSpec]()},
	kindEventPolicy:  {groupEventing, []string{"v1alpha1"}, reflect.TypeFor[eventPolicySpec]()},
	kindConfigMap:    {"", []string{"v1"}, nil},
}

// splitAPIVersion splits "group/version"; a core apiVersion ("v1") has no group.
func splitAPIVersion(av string) (group, version string) {
	if i := strings.LastIndexByte(av, '/'); i >= 0 {
		return av[:i], av[i+1:]
	}
	return "", av
}

// object is one document: a Kubernetes object. status is accepted and ignored, and so is
// every metadata field Sluice does not use (labels, uid…), so `kubectl get -o yaml`
// output loads.
type object struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   objectMeta      `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	Status     json.RawMessage `json:"status"`
	Data       json.RawMessage `json:"data"`       // a ConfigMap's
	BinaryData json.RawMessage `json:"binaryData"` // a ConfigMap's
	Immutable  json.RawMessage `json:"immutable"`  // a ConfigMap's
	Items      json.RawMessage `json:"items"`      // a List's
}

// objectMeta holds the metadata Sluice uses.
type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// kref is Knative's KReference: the object a Destination or spec.config names.
type kref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	Group      string `json:"group" unsupported:"a ref by group needs the cluster's API discovery; give apiVersion"`
	Address    string `json:"address" unsupported:"addresses of an object are not known outside the cluster"`
}

// destination is Knative's duck Destination.
type destination struct {
	Ref      *kref   `json:"ref"`
	URI      string  `json:"uri"`
	CACerts  *string `json:"CACerts"`
	Audience *string `json:"audience"`
}

type deliverySpec struct {
	DeadLetterSink *destination `json:"deadLetterSink"`
	Retry          *int         `json:"retry"`
	BackoffPolicy  *string      `json:"backoffPolicy"`
	BackoffDelay   *string      `json:"backoffDelay"`
	Timeout        *string      `json:"timeout"`
	RetryAfterMax  *string      `json:"retryAfterMax"`
	Format         *string      `json:"format"`
}

type brokerSpec struct {
	Config   *kref         `json:"config"`
	Delivery *deliverySpec `json:"delivery"`
}

type triggerFilter struct {
	Attributes map[string]string `json:"attributes"`
}

type triggerSpec struct {
	Broker     string          `json:"broker"`
	BrokerRef  json.RawMessage `json:"brokerRef" unsupported:"a broker in another namespace; name a Broker of the trigger's namespace in spec.broker"`
	Filter     *triggerFilter  `json:"filter"`
	Filters    []filter.Spec   `json:"filters"`
	Subscriber *destination    `json:"subscriber"`
	Delivery   *deliverySpec   `json:"delivery"`
}

type channelTemplate struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec"`
}

// subscriberSpec is an entry of a channel's spec.subscribers, which Knative's
// Subscription controller writes: Sluice reads the Subscriptions themselves.
type subscriberSpec struct {
	UID json.RawMessage `json:"uid"`
}

type channelSpec struct {
	ChannelTemplate *channelTemplate `json:"channelTemplate"`
	Delivery        *deliverySpec    `json:"delivery"`
	Subscribers     json.RawMessage  `json:"subscribers"`
}

type inMemoryChannelSpec struct {
	Delivery    *deliverySpec   `json:"delivery"`
	Subscribers json.RawMessage `json:"subscribers"`
}

// kafkaTopicSpec is the part of a KafkaChannel's spec a channelTemplate may set.
type kafkaTopicSpec struct {
	NumPartitions     int     `json:"numPartitions"`
	ReplicationFactor int     `json:"replicationFactor"`
	RetentionDuration *string `json:"retentionDuration"`
}

type kafkaChannelSpec struct {
	NumPartitions     int             `json:"numPartitions"`
	ReplicationFactor int             `json:"replicationFactor"`
	RetentionDuration *string         `json:"retentionDuration"`
	Delivery          *deliverySpec   `json:"delivery"`
	Subscribers       json.RawMessage `json:"subscribers"`
}

type subscriptionSpec struct {
	Channel    *kref         `json:"channel"`
	Subscriber *destination  `json:"subscriber"`
	Reply      *destination  `json:"reply"`
	Delivery   *deliverySpec `json:"delivery"`
}

// sequenceStep is a Destination with its own delivery.
type sequenceStep struct {
	destination
	Delivery *deliverySpec `json:"delivery"`
}

type sequenceSpec struct {
	Steps           []sequenceStep   `json:"steps"`
	ChannelTemplate *channelTemplate `json:"channelTemplate"`
	Reply           *destination     `json:"reply"`
}

type parallelBranch struct {
	Filter     *destination  `json:"filter"`
	Subscriber *destination  `json:"subscriber"`
	Reply      *destination  `json:"reply"`
	Delivery   *deliverySpec `json:"delivery"`
}

type parallelSpec struct {
	Branches        []parallelBranch `json:"branches"`
	ChannelTemplate *channelTemplate `json:"channelTemplate"`
	Reply           *destination     `json:"reply"`
}

type ceOverrides struct {
	Extensions map[string]string `json:"extensions"`
}

type pingSourceSpec struct {
	Schedule    string          `json:"schedule"`
	Timezone    string          `json:"timezone"`
	ContentType string          `json:"contentType"`
	Data        string          `json:"data"`
	DataBase64  string          `json:"dataBase64"`
	Sink        *destination    `json:"sink"`
	CEOverrides *ceOverrides    `json:"ceOverrides"`
	JSONData    json.RawMessage `json:"jsonData" unsupported:"removed from Knative with sources.knative.dev/v1alpha2; use data"`
}

// checkFields reports, through add, every key of the decoded JSON value v that the Go
// type t has no json field for ("unknown field"), and every key naming a field tagged
// unsupported ("supported by Knative, not by Sluice: why"), with its path. A list where t
// wants an object, or an object where it wants a list, is reported too.
// json.RawMessage fields accept anything (their content is checked where it is used).
func checkFields(path string, v any, t reflect.Type, add func(path, reason string)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() || v == nil {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			if _, isList := v.([]any); isList {
				add(path, "must be an object, not a list")
			}
			return // other type errors are reported by json.Unmarshal
		}
		type field struct {
			t           reflect.Type
			unsupported string
		}
		fields := map[string]field{}
		var collect func(t reflect.Type)
		collect = func(t reflect.Type) {
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				if f.Anonymous {
					collect(f.Type)
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				fields[name] = field{f.Type, f.Tag.Get("unsupported")}
			}
		}
		collect(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			switch {
			case !ok:
				add(join(path, k), "unknown field (not a Knative field of this object)")
			case f.unsupported != "":
				add(join(path, k), "supported by Knative, not by Sluice: "+f.unsupported)
			default:
				checkFields(join(path, k), m[k], f.t, add)
			}
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			if _, isMap := v.(map[string]any); isMap {
				add(path, "must be a list (each entry starts with \"- \"), not an object")
			}
			return
		}
		for i, e := range s {
			checkFields(path+"["+itoa(i)+"]", e, t.Elem(), add)
		}
	case reflect.Map:
		if m, ok := v.(map[string]any); ok {
			for _, k := range sortedKeys(m) {
				checkFields(join(path, k), m[k], t.Elem(), add)
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

func itoa(i int) string { return strconv.Itoa(i) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
