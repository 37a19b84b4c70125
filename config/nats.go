package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"

	"sigs.k8s.io/yaml"
)

// Knative's NATS JetStream objects (knative-extensions/eventing-natss): the
// NatsJetStreamBroker class, whose per-broker settings come from the annotation
// natsjetstream.eventing.knative.dev/config or else the ConfigMap
// natsjetstream-broker-config of the broker's namespace, and the NatsJetStreamChannel
// kind. Both run on the jetstream channel. Of their stream settings Sluice honours
// maxBytes and replicas (and storage: File, which is what it does); every other field
// makes the object not ready, naming it.
const (
	classNatsJetStream   = "NatsJetStreamBroker"
	kindNatsJetStream    = "NatsJetStreamChannel"
	cmNatsBroker         = "natsjetstream-broker-config"
	keyNatsBrokerConfig  = "config"
	annotationNatsConfig = "natsjetstream.eventing.knative.dev/config"
)

// natsStreamConfig is eventing-natss's StreamConfig.
type natsStreamConfig struct {
	MaxBytes           int64           `json:"maxBytes"`
	Replicas           int             `json:"replicas"`
	Storage            string          `json:"storage"`
	AdditionalSubjects json.RawMessage `json:"additionalSubjects" unsupported:"Sluice names its subjects itself"`
	Retention          json.RawMessage `json:"retention" unsupported:"Sluice's stream keeps an event until every subscription it was routed to has settled it"`
	MaxConsumers       json.RawMessage `json:"maxConsumers" unsupported:"Sluice makes one consumer per subscription"`
	MaxMsgs            json.RawMessage `json:"maxMsgs" unsupported:"bound the stream with maxBytes"`
	Discard            json.RawMessage `json:"discard" unsupported:"when the stream is full Sluice refuses new events (429); it never discards stored ones"`
	MaxAge             json.RawMessage `json:"maxAge" unsupported:"an event stays until it is delivered or dead-lettered"`
	MaxMsgSize         json.RawMessage `json:"maxMsgSize" unsupported:"the ingress's --max-event-bytes bounds an event"`
	NoAck              json.RawMessage `json:"noAck" unsupported:"every event is acknowledged once stored"`
	DuplicateWindow    json.RawMessage `json:"duplicateWindow" unsupported:"use the sluice.dev/dedup-window annotation"`
	Placement          json.RawMessage `json:"placement" unsupported:"only maxBytes, replicas and storage: File are honoured of a stream's config"`
	Mirror             json.RawMessage `json:"mirror" unsupported:"only maxBytes, replicas and storage: File are honoured of a stream's config"`
	Sources            json.RawMessage `json:"sources" unsupported:"only maxBytes, replicas and storage: File are honoured of a stream's config"`
}

// natsStream is a NatsJetStreamChannel's spec.stream.
type natsStream struct {
	OverrideName json.RawMessage   `json:"overrideName" unsupported:"Sluice names the stream after the channel"`
	Config       *natsStreamConfig `json:"config"`
}

// natsTemplateSpec is the part of a NatsJetStreamChannel's spec a channel template may set.
type natsTemplateSpec struct {
	Stream                 *natsStream     `json:"stream"`
	ConsumerConfigTemplate json.RawMessage `json:"consumerConfigTemplate" unsupported:"Sluice's consumers are its own: every subscription gets each event routed to it, retried by its delivery spec"`
	DeploymentSpecTemplate json.RawMessage `json:"deploymentSpecTemplate" unsupported:"the settings of a Kubernetes Deployment; Sluice runs no dispatcher Deployment"`
}

type natsJetStreamChannelSpec struct {
	natsTemplateSpec
	Delivery    *deliverySpec   `json:"delivery"`
	Subscribers json.RawMessage `json:"subscribers"`
}

// natsBrokerConfig is eventing-natss's NatsJetStreamBrokerConfig.
type natsBrokerConfig struct {
	Stream   *natsStreamConfig `json:"stream"`
	Consumer json.RawMessage   `json:"consumer" unsupported:"Sluice's consumers are its own: every subscription gets each event routed to it, retried by its delivery spec"`
	Ingress  json.RawMessage   `json:"ingress" unsupported:"the settings of a Kubernetes Deployment; Sluice runs no dispatcher Deployment"`
	Filter   json.RawMessage   `json:"filter" unsupported:"the settings of a Kubernetes Deployment; Sluice runs no dispatcher Deployment"`
}

// natsBrokerDefaults is the value of natsjetstream-broker-config's key config.
type natsBrokerDefaults struct {
	ClusterDefault    json.RawMessage            `json:"clusterDefault"`
	NamespaceDefaults map[string]json.RawMessage `json:"namespaceDefaults"`
}

// streamSettings checks the values of a StreamConfig written at errPath (its fields
// were checked by checkFields) and returns the settings it gives the jetstream backend,
// keyed keyPath.maxBytes and keyPath.replicas. Zero values are unset, as in
// eventing-natss; maxBytes -1 is NATS's "unlimited".
func streamSettings(errPath, keyPath string, sc *natsStreamConfig, fail func(string)) Settings {
	if sc == nil {
		return nil
	}
	var s Settings
	switch {
	case sc.MaxBytes > 0:
		s = s.with(keyPath+".maxBytes", strconv.FormatInt(sc.MaxBytes, 10))
	case sc.MaxBytes < -1:
		fail(fmt.Sprintf("%s.maxBytes: %d: want a positive number of bytes, or -1 (unlimited)", errPath, sc.MaxBytes))
	}
	if sc.Replicas != 0 {
		s = s.with(keyPath+".replicas", strconv.Itoa(sc.Replicas))
	}
	switch sc.Storage {
	case "", "File":
	default:
		fail(fmt.Sprintf("%s.storage: %q: supported by Knative, not by Sluice: Sluice's streams are stored in files (File)", errPath, sc.Storage))
	}
	return s
}

// natsChannelSettings are the settings of a NatsJetStreamChannel's spec (or a
// template's) written at path: its spec.stream.config's, keyed as the channel's fields
// (spec.stream.config.maxBytes) wherever the spec was written.
func natsChannelSettings(path string, ts *natsTemplateSpec, fail func(string)) Settings {
	if ts == nil || ts.Stream == nil {
		return nil
	}
	return streamSettings(path+".stream.config", "spec.stream.config", ts.Stream.Config, fail)
}

// natsBroker returns the settings of a NatsJetStreamBroker in namespace ns with
// annotations ann: its natsjetstream.eventing.knative.dev/config annotation when it has
// one, else the entry for ns (then clusterDefault) of the ConfigMap
// natsjetstream-broker-config in ns, as eventing-natss reads them.
func (c *classes) natsBroker(ns string, ann map[string]string) (Settings, []string) {
	var errs []string
	fail := func(s string) { errs = append(errs, s) }
	if a, ok := ann[annotationNatsConfig]; ok && a != "" {
		where := "metadata.annotations." + annotationNatsConfig
		return natsBrokerConfigSettings(where, []byte(a), fail), errs
	}
	data, ok := c.cms[ns+"/"+cmNatsBroker]
	if !ok {
		return nil, nil
	}
	cmName := "ConfigMap " + ns + "/" + cmNatsBroker
	for k := range data {
		if k != keyNatsBrokerConfig {
			fail(fmt.Sprintf("%s: data.%s: not a key of %s (%s)", cmName, k, cmNatsBroker, keyNatsBrokerConfig))
		}
	}
	text := data[keyNatsBrokerConfig]
	if text == "" {
		return nil, errs
	}
	var d natsBrokerDefaults
	if err := unmarshalEmbedded(text, &d); err != nil {
		fail(fmt.Sprintf("%s: data.%s: %v", cmName, keyNatsBrokerConfig, err))
		return nil, errs
	}
	where, entry := "clusterDefault", d.ClusterDefault
	if nd, ok := d.NamespaceDefaults[ns]; ok && len(nd) > 0 && !bytes.Equal(nd, []byte("null")) {
		where, entry = "namespaceDefaults."+ns, nd
	}
	if len(entry) == 0 || bytes.Equal(entry, []byte("null")) {
		return nil, errs
	}
	return natsBrokerConfigSettings(cmName+": data."+keyNatsBrokerConfig+"."+where, entry, fail), errs
}

// natsBrokerConfigSettings checks a NatsJetStreamBrokerConfig (JSON or YAML) written
// at where and returns its stream settings, keyed where.stream.<field>.
func natsBrokerConfigSettings(where string, raw []byte, fail func(string)) Settings {
	if n := expandedSize(raw, MaxEmbeddedYAMLBytes); n > MaxEmbeddedYAMLBytes {
		fail(fmt.Sprintf("%s: expands to more than %s with its YAML aliases (config.MaxEmbeddedYAMLBytes)", where, mib(MaxEmbeddedYAMLBytes)))
		return nil
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		fail(fmt.Sprintf("%s: not JSON: %v", where, err))
		return nil
	}
	var generic any
	_ = json.Unmarshal(js, &generic)
	if _, ok := generic.(map[string]any); !ok {
		fail(where + ": must be an object")
		return nil
	}
	bad := false
	checkFields(where, generic, reflect.TypeFor[natsBrokerConfig](), func(p, r string) {
		fail(p + ": " + r)
		bad = true
	})
	var bc natsBrokerConfig
	if err := json.Unmarshal(js, &bc); err != nil {
		fail(typeError(where, err))
		return nil
	}
	if bad {
		return nil
	}
	return streamSettings(where+".stream", where+".stream", bc.Stream, fail)
}
