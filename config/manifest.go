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
// does not honour, and one tagged `removed:"why"` a field Knative itself no longer has:
// setting either makes the object not ready with that reason (see checkFields).

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
	apiMessagingNats = groupMessaging + "/v1alpha1"
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
	annotationMaxDelivery    = "sluice.dev/max-delivery-rate"
	annotationMaxInFlight    = "sluice.dev/max-in-flight"
	annotationClass          = "eventing.knative.dev/broker.class"
	annotationExternalTopic  = "kafka.eventing.knative.dev/external.topic"
)

// kindInfo is what Sluice runs of one kind: its API group, its current version, the
// older versions it reads as the current one, and its spec type.
type kindInfo struct {
	group   string
	version string
	// older are versions Knative no longer serves (or deprecated) whose fields Sluice
	// reads are the same as the current version's: they are read as it, with a note.
	older []string
	spec  reflect.Type
}

// kinds are the kinds Sluice runs.
var kinds = map[string]kindInfo{
	kindBroker:       {groupEventing, "v1", []string{"v1beta1"}, reflect.TypeFor[brokerSpec]()},
	kindTrigger:      {groupEventing, "v1", []string{"v1beta1"}, reflect.TypeFor[triggerSpec]()},
	kindChannel:      {groupMessaging, "v1", []string{"v1beta1"}, reflect.TypeFor[channelSpec]()},
	kindInMemory:     {groupMessaging, "v1", []string{"v1beta1"}, reflect.TypeFor[inMemoryChannelSpec]()},
	kindKafkaChannel: {groupMessaging, "v1beta1", nil, reflect.TypeFor[kafkaChannelSpec]()},
	// eventing-natss's channel (messaging.knative.dev/v1alpha1), run on the jetstream channel.
	kindNatsJetStream: {groupMessaging, "v1alpha1", nil, reflect.TypeFor[natsJetStreamChannelSpec]()},
	kindSubscription:  {groupMessaging, "v1", []string{"v1beta1"}, reflect.TypeFor[subscriptionSpec]()},
	kindSequence:      {groupFlows, "v1", []string{"v1beta1"}, reflect.TypeFor[sequenceSpec]()},
	kindParallel:      {groupFlows, "v1", []string{"v1beta1"}, reflect.TypeFor[parallelSpec]()},
	kindPingSource:    {groupSources, "v1", []string{"v1beta2"}, reflect.TypeFor[pingSourceSpec]()},
	kindEventPolicy:   {groupEventing, "v1alpha1", nil, reflect.TypeFor[eventPolicySpec]()},
	kindConfigMap:     {"", "v1", nil, nil},
}

// differingVersion says what differs between an older version of a kind Sluice runs,
// removed from Knative, and the current version ("" if the version is not one of them):
// key is "group/version Kind". Sluice refuses such versions, naming the version to use.
func differingVersion(key string) string {
	switch key {
	case groupEventing + "/v1alpha1 " + kindBroker:
		return "spec.channelTemplateSpec became spec.config, a ConfigMap holding the channel template"
	case groupEventing + "/v1alpha1 " + kindTrigger:
		return "spec.filter.sourceAndType became spec.filter.attributes"
	case groupMessaging + "/v1alpha1 " + kindChannel:
		return "spec.subscribable became spec.subscribers"
	case groupMessaging + "/v1alpha1 " + kindInMemory:
		return "spec.subscribable became spec.subscribers"
	case groupMessaging + "/v1alpha1 " + kindKafkaChannel:
		return "spec.subscribable became spec.subscribers"
	case groupMessaging + "/v1alpha1 " + kindSubscription:
		return "its subscriber and reply became Destinations"
	case groupFlows + "/v1alpha1 " + kindSequence:
		return "its steps and reply became Destinations"
	case groupFlows + "/v1alpha1 " + kindParallel:
		return "its branches and reply became Destinations"
	case groupSources + "/v1alpha2 " + kindPingSource:
		return "spec.jsonData became spec.data"
	case groupSources + "/v1beta1 " + kindPingSource:
		return "spec.jsonData became spec.data"
	}
	return ""
}

// apiVersion is the current apiVersion of k.
func (k kindInfo) apiVersion() string {
	if k.group == "" {
		return k.version
	}
	return k.group + "/" + k.version
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
	Broker     string         `json:"broker"`
	BrokerRef  *kref          `json:"brokerRef"`
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
	JSONData    json.RawMessage `json:"jsonData" removed:"a field of sources.knative.dev/v1alpha2 and v1beta1 PingSource only; write the same text as spec.data"`
}

// checkFields reports, through add, every key of the decoded JSON value v that the Go
// type t has no json field for ("unknown field"), and every key naming a field tagged
// unsupported ("supported by Knative, not by Sluice: why") or removed ("removed from
// Knative …: why"), with its path. A list where t
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
			t                    reflect.Type
			unsupported, removed string
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
				fields[name] = field{f.Type, f.Tag.Get("unsupported"), f.Tag.Get("removed")}
			}
		}
		collect(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			switch {
			case !ok:
				add(join(path, k), "unknown field (not a Knative field of this object)")
			case f.removed != "":
				add(join(path, k), "removed from Knative (not a field of this apiVersion): "+f.removed)
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
