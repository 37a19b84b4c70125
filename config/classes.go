package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Broker classes Sluice runs, and Knative's stock ConfigMaps.
const (
	classMTChannel       = "MTChannelBasedBroker"
	classKafka           = "Kafka"
	classKafkaNamespaced = "KafkaNamespaced" // a Kafka broker whose data plane runs in its namespace
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

// brokerClasses are the broker classes Sluice runs, in the order messages list them.
func brokerClasses() []string {
	return []string{ClassSluice, classMTChannel, classKafka, classKafkaNamespaced, classNatsJetStream, classRabbitMQ}
}

// cloudClass says, for a class whose data plane is a cloud provider's service, that
// Sluice does not run it ("" for other classes).
func cloudClass(class string) string {
	switch strings.ToLower(class) {
	case "googlecloud", "pubsub", "cloudpubsub":
		return ": its events live in Google Cloud Pub/Sub, which Sluice does not run"
	case "awssqs", "sqs", "awssqsbroker", "sqsbroker":
		return ": its events live in AWS SQS, which Sluice does not run"
	}
	return ""
}

// brokerDefault is one entry of config-br-defaults' default-br-config.
type brokerDefault struct {
	BrokerClass string        `json:"brokerClass"`
	APIVersion  string        `json:"apiVersion"`
	Kind        string        `json:"kind"`
	Name        string        `json:"name"`
	Namespace   string        `json:"namespace"`
	Delivery    *deliverySpec `json:"delivery"`
	// Knative's per-class configs and its namespace-config switch: refused (unsupported).
	BrokerClasses                    json.RawMessage `json:"brokerClasses"`
	DisallowDifferentNamespaceConfig json.RawMessage `json:"disallowDifferentNamespaceConfig"`
}

// unsupported names the first field of the entry at path Sluice does not honour.
func (d *brokerDefault) unsupported(path string) error {
	switch {
	case d == nil:
	case len(d.BrokerClasses) > 0:
		return fmt.Errorf("%s.brokerClasses: supported by Knative, not by Sluice: give each Broker its class's spec.config", path)
	case len(d.DisallowDifferentNamespaceConfig) > 0:
		return fmt.Errorf("%s.disallowDifferentNamespaceConfig: supported by Knative, not by Sluice", path)
	}
	return nil
}

// decodeBrokerDefaults decodes config-br-defaults' default-br-config, refusing the
// fields Sluice does not honour; the error names the ConfigMap and the field.
func (c *classes) decodeBrokerDefaults() (brokerDefaults, error) {
	if c.brDefaults == nil {
		d, err := c.checkBrokerDefaults()
		c.brDefaults = &decodedYAML{d, err}
	}
	return c.brDefaults.v.(brokerDefaults), c.brDefaults.err
}

// checkBrokerDefaults is decodeBrokerDefaults' work, done once per load.
func (c *classes) checkBrokerDefaults() (brokerDefaults, error) {
	where := "ConfigMap " + systemNamespace + "/" + cmBrokerDefaults + ": data.default-br-config"
	d, err := decode[brokerDefaults](c, systemNamespace+"/"+cmBrokerDefaults, "default-br-config")
	if err != nil {
		return d, fmt.Errorf("%s: %v", where, err)
	}
	if err := d.ClusterDefault.unsupported(where + ".clusterDefault"); err != nil {
		return d, err
	}
	for _, ns := range sortedKeys(d.NamespaceDefaults) {
		if err := d.NamespaceDefaults[ns].unsupported(where + ".namespaceDefaults." + ns); err != nil {
			return d, err
		}
	}
	return d, nil
}

// hasConfig reports whether the entry gives a config or delivery of its own (Knative's
// inline BrokerConfig), beyond a class.
func (d *brokerDefault) hasConfig() bool {
	return d.APIVersion != "" || d.Kind != "" || d.Name != "" || d.Namespace != "" || d.Delivery != nil
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
	cms     map[string]map[string]string         // "ns/name" → data
	rabbit  map[string]*rabbitmqBrokerConfigSpec // RabbitmqBrokerConfigs by "ns/name"
	decoded map[string]decodedYAML               // "ns/name\x00key" → the value's YAML, decoded

	brDefaults *decodedYAML // config-br-defaults' default-br-config, decoded and checked once
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
	d, err := c.decodeBrokerDefaults()
	if err != nil {
		return brokerDefault{}, err
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
	if bd.Namespace == "" {
		bd.Namespace = ns
	}
	return *bd, nil
}

// BrokerDefaultClass returns the class of a Broker of namespace ns with no class
// annotation, as the file mode reads it: from data, the data of the ConfigMap
// knative-eventing/config-br-defaults (its namespaceDefaults, then clusterDefault), or
// Knative's stock default, MTChannelBasedBroker, if data is nil. The error names the
// ConfigMap and the field; the class is then the stock default.
func BrokerDefaultClass(data map[string]string, ns string) (string, error) {
	c := &classes{cms: map[string]map[string]string{}}
	if data != nil {
		c.cms[systemNamespace+"/"+cmBrokerDefaults] = data
	}
	d, err := c.brokerDefault(ns)
	if err != nil {
		return classMTChannel, err
	}
	return d.BrokerClass, nil
}

// defaultDelivery returns the delivery config-br-defaults gives a Broker of namespace ns
// that has no spec.delivery, and the field it was written at; nil when none. As the
// class and config do, it comes from the namespace's entry (namespaceDefaults, its
// brokerClass clusterDefault's when it names none) when that entry is for the Broker's
// class (its annotation, else the default class) and gives a config or delivery, else
// from clusterDefault: Knative's webhook looks the entry up by class the same way.
func (c *classes) defaultDelivery(ns string, b *brokerObj) (*deliverySpec, string, error) {
	if _, ok := c.cms[systemNamespace+"/"+cmBrokerDefaults]; !ok {
		return nil, "", nil // Knative's stock config-br-defaults has no delivery
	}
	d, err := c.decodeBrokerDefaults()
	if err != nil {
		return nil, "", err
	}
	where := "ConfigMap " + systemNamespace + "/" + cmBrokerDefaults + ": data.default-br-config."
	clusterClass := classMTChannel
	if d.ClusterDefault != nil && d.ClusterDefault.BrokerClass != "" {
		clusterClass = d.ClusterDefault.BrokerClass
	}
	class := b.class
	if nd := d.NamespaceDefaults[ns]; nd != nil {
		nsClass := nd.BrokerClass
		if nsClass == "" {
			nsClass = clusterClass
		}
		if class == "" {
			class = nsClass
		}
		if nsClass == class && nd.hasConfig() {
			return nd.Delivery, where + "namespaceDefaults." + ns + ".delivery", nil
		}
	}
	if cd := d.ClusterDefault; cd != nil && cd.hasConfig() {
		return cd.Delivery, where + "clusterDefault.delivery", nil
	}
	return nil, "", nil
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
	if class == classRabbitMQ {
		return c.rabbitmqBroker(b, ns, ref, refField)
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
	if !slices.Contains(brokerClasses(), class) {
		// The class is the blocker: nothing else of a broker Sluice does not run matters.
		where := "metadata.annotations." + annotationClass
		if b.class == "" {
			where = "the default class (ConfigMap " + systemNamespace + "/" + cmBrokerDefaults + ")"
		}
		return out, []string{fmt.Sprintf("%s: %q is not a broker class Sluice runs (%s)%s", where, class, strings.Join(brokerClasses(), ", "), cloudClass(class))}
	}
	if class == classNatsJetStream {
		// eventing-natss reads no spec.config: its settings are its own annotation's, or
		// its namespace's natsjetstream-broker-config's.
		out.backend = ChannelJetStream
		out.settings, errs = c.natsBroker(ns, p.annotations)
		if b.externalTopic != "" {
			errs = append(errs, fmt.Sprintf("metadata.annotations.%s: only for a broker of class %s or %s", annotationExternalTopic, classKafka, classKafkaNamespaced))
		}
		if b.backend != "" && b.backend != out.backend {
			errs = append(errs, fmt.Sprintf("metadata.annotations.%s: %q conflicts with the %s backend that broker class %s means",
				annotationChannel, b.backend, out.backend, class))
		}
		return out, errs
	}
	if p.annotations[annotationNatsConfig] != "" {
		errs = append(errs, fmt.Sprintf("metadata.annotations.%s: only for a broker of class %s", annotationNatsConfig, classNatsJetStream))
	}
	if class == classKafkaNamespaced && b.config != nil && b.config.Namespace != "" && b.config.Namespace != ns {
		// Knative's webhook refuses it too: the namespace's own data plane reads it.
		return out, []string{fmt.Sprintf("spec.config.namespace: %q: a %s broker's ConfigMap must be in the Broker's namespace (%s)", b.config.Namespace, classKafkaNamespaced, ns)}
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
	case classKafka, classKafkaNamespaced:
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
	if b.externalTopic != "" && out.backend != ChannelKafka {
		errs = append(errs, fmt.Sprintf("metadata.annotations.%s: only for a broker of class %s or %s", annotationExternalTopic, classKafka, classKafkaNamespaced))
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
	case kindNatsJetStream:
		scratch := &parsed{}
		var ts natsTemplateSpec
		path := "data.default-ch-config.spec"
		scratch.templateSpec(path, cd.Spec, reflect.TypeFor[natsTemplateSpec](), &ts)
		settings := natsChannelSettings(path, &ts, func(m string) { scratch.fail("%s", m) })
		if scratch.failed() {
			return nil, fmt.Errorf("%s: %s", where, strings.Join(scratch.reasons, "; "))
		}
		return &tmpl{kind: kindNatsJetStream, backend: ChannelJetStream, settings: settings}, nil
	}
	return nil, fmt.Errorf("%s: data.default-ch-config: kind %q is not supported; use %s, %s or %s", where, cd.Kind, kindInMemory, kindKafkaChannel, kindNatsJetStream)
}
