package config

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Broker classes Sluice runs, and Knative's stock ConfigMaps.
const (
	classMTChannel = "MTChannelBasedBroker"
	classKafka     = "Kafka"
	// ClassSluice is Sluice's own broker class: the broker runs on the channel its
	// sluice.dev/channel annotation names, or the server's --channel.
	ClassSluice = "Sluice"

	systemNamespace        = "knative-eventing"
	cmBrokerDefaults       = "config-br-defaults"
	cmBrokerDefaultChannel = "config-br-default-channel"
	cmKafkaBroker          = "kafka-broker-config"
	cmChannelDefaults      = "default-ch-webhook"

	keyChannelTemplate       = "channel-template-spec"
	keyChannelTemplateLegacy = "channelTemplateSpec"
	keyBootstrapServers      = "bootstrap.servers"
	keyTopicPartitions       = "default.topic.partitions"
	keyTopicReplication      = "default.topic.replication.factor"
	keyKafkaAuthSecret       = "auth.secret.ref.name"
)

// brokerDefault is one entry of config-br-defaults' default-br-config.
type brokerDefault struct {
	BrokerClass string          `json:"brokerClass"`
	APIVersion  string          `json:"apiVersion"`
	Kind        string          `json:"kind"`
	Name        string          `json:"name"`
	Namespace   string          `json:"namespace"`
	Delivery    json.RawMessage `json:"delivery"`
}

type brokerDefaults struct {
	ClusterDefault    *brokerDefault            `json:"clusterDefault"`
	NamespaceDefaults map[string]*brokerDefault `json:"namespaceDefaults"`
}

// channelDefault is one entry of default-ch-webhook's default-ch-config.
type channelDefault struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Spec       json.RawMessage `json:"spec"`
}

type channelDefaults struct {
	ClusterDefault    *channelDefault            `json:"clusterDefault"`
	NamespaceDefaults map[string]*channelDefault `json:"namespaceDefaults"`
}

// classes answers what backend a Broker or channel runs on, from its annotations, the
// ConfigMaps of the configuration and Knative's stock defaults.
type classes struct {
	cms     map[string]map[string]string // "ns/name" → data
	decoded map[string]decodedYAML       // "ns/name\x00key" → the value's YAML, decoded
}

// decodedYAML is a ConfigMap value's YAML text decoded, or why it could not be.
type decodedYAML struct {
	v   any
	err error
}

// decode decodes the YAML text of the value key of ConfigMap cm ("ns/name") into a T, once
// however many brokers and channels read it: the result is shared, and must not be
// changed.
func decode[T any](c *classes, cm, key string) (T, error) {
	k := cm + "\x00" + key
	if d, ok := c.decoded[k]; ok {
		return d.v.(T), d.err
	}
	var v T
	err := unmarshalEmbedded(c.cms[cm][key], &v)
	if c.decoded == nil {
		c.decoded = map[string]decodedYAML{}
	}
	c.decoded[k] = decodedYAML{v, err}
	return v, err
}

// stockBrokerDefault is Knative's stock config-br-defaults: MTChannelBasedBroker on
// config-br-default-channel.
var stockBrokerDefault = brokerDefault{BrokerClass: classMTChannel, APIVersion: "v1", Kind: kindConfigMap,
	Name: cmBrokerDefaultChannel, Namespace: systemNamespace}

// brokerDefault returns the default class and config of a Broker in namespace ns.
func (c *classes) brokerDefault(ns string) (brokerDefault, error) {
	if _, ok := c.cms[systemNamespace+"/"+cmBrokerDefaults]; !ok {
		return stockBrokerDefault, nil
	}
	where := "ConfigMap " + systemNamespace + "/" + cmBrokerDefaults
	d, err := decode[brokerDefaults](c, systemNamespace+"/"+cmBrokerDefaults, "default-br-config")
	if err != nil {
		return brokerDefault{}, fmt.Errorf("%s: data.default-br-config: %v", where, err)
	}
	bd := d.ClusterDefault
	if nd, ok := d.NamespaceDefaults[ns]; ok && nd != nil {
		n := *nd
		if n.BrokerClass == "" && bd != nil { // the class comes from the cluster default
			n.BrokerClass = bd.BrokerClass
		}
		bd = &n
	}
	if bd == nil {
		return stockBrokerDefault, nil
	}
	b := *bd // d is shared by every broker: change a copy
	bd = &b
	if bd.BrokerClass == "" {
		bd.BrokerClass = classMTChannel // Knative's default class
	}
	if len(bd.Delivery) > 0 {
		return brokerDefault{}, fmt.Errorf("%s: data.default-br-config: delivery: supported by Knative, not by Sluice; set spec.delivery on the Broker", where)
	}
	if bd.Namespace == "" {
		bd.Namespace = ns
	}
	return *bd, nil
}

// brokerBackend is what a Broker runs on.
type brokerBackend struct {
	class, backend string
	settings       Settings
}

// broker resolves p's class and backend. Errors name the field or ConfigMap at fault.
func (c *classes) broker(p *parsed) (brokerBackend, []string) {
	b := p.broker
	ns := p.status.Namespace
	var errs []string
	class, ref := b.class, b.config
	refField := "spec.config"
	if class == "" && b.backend != "" && ref == nil {
		// A Sluice broker: the sluice.dev/channel annotation alone chooses the backend.
		return brokerBackend{class: classMTChannel, backend: b.backend}, nil
	}
	if class == "" || ref == nil {
		d, err := c.brokerDefault(ns)
		if err != nil {
			return brokerBackend{}, []string{err.Error()}
		}
		if class == "" {
			class = d.BrokerClass
		}
		if ref == nil && class == d.BrokerClass && d.Name != "" {
			ref = &kref{APIVersion: d.APIVersion, Kind: d.Kind, Name: d.Name, Namespace: d.Namespace}
			if _, custom := c.cms[systemNamespace+"/"+cmBrokerDefaults]; custom {
				refField = "the default config (ConfigMap " + systemNamespace + "/" + cmBrokerDefaults + ")"
			}
		}
	}
	out := brokerBackend{class: class}
	if class == ClassSluice {
		if b.config != nil {
			errs = append(errs, fmt.Sprintf("spec.config: a broker of class %s reads no ConfigMap; choose its channel with metadata.annotations.%s", ClassSluice, annotationChannel))
		}
		if b.externalTopic != "" {
			errs = append(errs, fmt.Sprintf("metadata.annotations.%s: only for a broker of class %s", annotationExternalTopic, classKafka))
		}
		out.backend = b.backend
		if out.backend == "" {
			out.backend = ChannelDefault
		}
		return out, errs
	}
	if class != classMTChannel && class != classKafka {
		// The class is the blocker: nothing else of a broker Sluice does not run matters.
		where := "metadata.annotations." + annotationClass
		if b.class == "" {
			where = "the default class (ConfigMap " + systemNamespace + "/" + cmBrokerDefaults + ")"
		}
		return out, []string{fmt.Sprintf("%s: %q is not a broker class Sluice runs (%s, %s, %s)", where, class, ClassSluice, classMTChannel, classKafka)}
	}
	if ref != nil && (ref.Kind != kindConfigMap || (ref.APIVersion != "" && ref.APIVersion != "v1")) {
		return out, []string{fmt.Sprintf("%s: %s %q is not supported; a %s broker reads a v1 ConfigMap", refField, ref.APIVersion, ref.Kind, class)}
	}
	var data map[string]string
	stock := false
	if ref != nil {
		rns := ref.Namespace
		if rns == "" {
			rns = ns
		}
		var ok bool
		data, ok = c.cms[rns+"/"+ref.Name]
		switch {
		case ok:
		case rns == systemNamespace && (ref.Name == cmBrokerDefaultChannel || ref.Name == cmBrokerDefaults || ref.Name == cmKafkaBroker):
			stock = true // Knative's stock contents: Sluice's defaults and flags
		default:
			return out, []string{fmt.Sprintf("%s: ConfigMap %s/%s is not in the configuration", refField, rns, ref.Name)}
		}
	}
	cmName := ""
	if ref != nil {
		cmName = "ConfigMap " + ref.Name
	}
	switch class {
	case classMTChannel:
		if data == nil || stock {
			if stock && ref.Name == cmKafkaBroker {
				errs = append(errs, fmt.Sprintf("spec.config: %s is the Kafka broker's; a %s broker needs a channel-template-spec", cmName, classMTChannel))
			}
			out.backend = ChannelDefault
			break
		}
		spec, key := data[keyChannelTemplate], keyChannelTemplate
		if spec == "" {
			spec, key = data[keyChannelTemplateLegacy], keyChannelTemplateLegacy
		}
		cmKey := ref.Namespace
		if cmKey == "" {
			cmKey = ns
		}
		cmKey += "/" + ref.Name
		for k := range data {
			if k != keyChannelTemplate && k != keyChannelTemplateLegacy {
				errs = append(errs, fmt.Sprintf("spec.config: %s: data.%s: not a key of a %s broker's ConfigMap", cmName, k, classMTChannel))
			}
		}
		if spec == "" {
			errs = append(errs, fmt.Sprintf("spec.config: %s: data.%s: required", cmName, keyChannelTemplate))
			break
		}
		t, err := decode[channelTemplate](c, cmKey, key)
		if err != nil {
			errs = append(errs, fmt.Sprintf("spec.config: %s: data.%s: %v", cmName, key, err))
			break
		}
		scratch := &parsed{}
		tp := scratch.template("spec.config: "+cmName+": data."+key, &t)
		errs = append(errs, scratch.reasons...)
		if tp != nil {
			out.backend, out.settings = tp.backend, tp.settings
		}
	case classKafka:
		out.backend = ChannelKafka
		for k, v := range data {
			switch k {
			case keyBootstrapServers:
				out.settings = out.settings.with("data."+k, v)
			case keyTopicPartitions, keyTopicReplication:
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 1 {
					errs = append(errs, fmt.Sprintf("spec.config: %s: data.%s: %q is not a positive integer", cmName, k, v))
				} else {
					out.settings = out.settings.with("data."+k, v)
				}
			case keyKafkaAuthSecret:
				errs = append(errs, fmt.Sprintf("spec.config: %s: data.%s: supported by Knative, not by Sluice: Sluice connects to Kafka without TLS or SASL", cmName, k))
			default:
				errs = append(errs, fmt.Sprintf("spec.config: %s: data.%s: not a key Sluice knows of a Kafka broker's ConfigMap (%s, %s, %s)",
					cmName, k, keyBootstrapServers, keyTopicPartitions, keyTopicReplication))
			}
		}
		out.settings = out.settings.with(annotation(annotationExternalTopic), b.externalTopic)
	}
	if b.externalTopic != "" && class != classKafka {
		errs = append(errs, fmt.Sprintf("metadata.annotations.%s: only for a broker of class %s", annotationExternalTopic, classKafka))
	}
	if b.backend != "" {
		switch {
		case out.backend == ChannelDefault:
			out.backend = b.backend
		case out.backend != b.backend:
			errs = append(errs, fmt.Sprintf("metadata.annotations.%s: %q conflicts with the %s backend that broker class %s and its config mean",
				annotationChannel, b.backend, out.backend, class))
		}
	}
	return out, errs
}

// channelDefault returns the template a channel without one gets in namespace ns, from
// default-ch-webhook (nil: the server's --channel, as for Knative's stock
// InMemoryChannel default).
func (c *classes) channelDefault(ns string) (*tmpl, error) {
	if _, ok := c.cms[systemNamespace+"/"+cmChannelDefaults]; !ok {
		return nil, nil
	}
	where := "ConfigMap " + systemNamespace + "/" + cmChannelDefaults
	d, err := decode[channelDefaults](c, systemNamespace+"/"+cmChannelDefaults, "default-ch-config")
	if err != nil {
		return nil, fmt.Errorf("%s: data.default-ch-config: %v", where, err)
	}
	cd := d.ClusterDefault
	if nd, ok := d.NamespaceDefaults[ns]; ok {
		cd = nd
	}
	if cd == nil {
		return nil, nil
	}
	// The defaults name a kind; its version follows the installed CRDs, so any version of
	// the kind is read.
	switch cd.Kind {
	case kindInMemory:
		return &tmpl{kind: kindInMemory, backend: ChannelMemory}, nil
	case kindKafkaChannel:
		var ks kafkaTopicSpec
		if len(cd.Spec) > 0 {
			if err := json.Unmarshal(cd.Spec, &ks); err != nil {
				return nil, fmt.Errorf("%s: data.default-ch-config: spec: %v", where, err)
			}
		}
		return &tmpl{kind: kindKafkaChannel, backend: ChannelKafka, settings: topicSettings(ks.NumPartitions, ks.ReplicationFactor)}, nil
	}
	return nil, fmt.Errorf("%s: data.default-ch-config: kind %q is not supported; use %s or %s", where, cd.Kind, kindInMemory, kindKafkaChannel)
}
