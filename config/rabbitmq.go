package config

import (
	"fmt"
)

// Knative's RabbitMQ broker (eventing-rabbitmq): the class, the kind its spec.config
// names, and what the rabbitmq channel reads of it.
const (
	classRabbitMQ            = "RabbitMQBroker"
	kindRabbitmqBrokerConfig = "RabbitmqBrokerConfig"
	kindRabbitmqCluster      = "RabbitmqCluster"
	apiRabbitmqBrokerConfig  = groupEventing + "/v1alpha1"
	apiRabbitmqCluster       = "rabbitmq.com/v1beta1"

	rabbitQuorum  = "quorum"
	rabbitClassic = "classic"
)

// rabbitmqBrokerConfigSpec is eventing-rabbitmq's RabbitmqBrokerConfig spec.
type rabbitmqBrokerConfigSpec struct {
	RabbitmqClusterReference *rabbitmqClusterReference `json:"rabbitmqClusterReference"`
	QueueType                string                    `json:"queueType"`
	Vhost                    string                    `json:"vhost"`
}

// rabbitmqClusterReference names the cluster: a RabbitmqCluster of the RabbitMQ
// operator, or a Secret holding its address. Sluice reaches it at --rabbitmq-url.
type rabbitmqClusterReference struct {
	Name             string     `json:"name"`
	Namespace        string     `json:"namespace"`
	ConnectionSecret *secretRef `json:"connectionSecret"`
}

type secretRef struct {
	Name string `json:"name"`
}

// rabbitmqBrokerConfig checks a RabbitmqBrokerConfig as Knative's webhook does and
// keeps it for the brokers that name it.
func (p *parsed) rabbitmqBrokerConfig(s *rabbitmqBrokerConfigSpec) {
	r := s.RabbitmqClusterReference
	switch {
	case r == nil:
		p.fail("spec.rabbitmqClusterReference: required")
	case r.Name == "" && r.ConnectionSecret == nil:
		p.fail("spec.rabbitmqClusterReference: name or connectionSecret required")
	case r.Name != "" && r.ConnectionSecret != nil:
		p.fail("spec.rabbitmqClusterReference: give name or connectionSecret, not both")
	}
	switch s.QueueType {
	case "", rabbitQuorum, rabbitClassic:
	default:
		p.fail("spec.queueType: %q is not %s or %s", s.QueueType, rabbitQuorum, rabbitClassic)
	}
	p.rabbit = s
}

// rabbitmqBroker resolves a broker of class RabbitMQBroker: the rabbitmq channel, with
// the queue type and vhost of the RabbitmqBrokerConfig its spec.config names (a
// RabbitmqCluster means the defaults). The cluster either names is the one Sluice
// reaches at --rabbitmq-url. Errors name the field.
func (c *classes) rabbitmqBroker(b *brokerObj, ns string, ref *kref, refField string) (brokerBackend, []string) {
	out := brokerBackend{class: classRabbitMQ, backend: ChannelRabbitMQ}
	var errs []string
	switch {
	case ref == nil:
		errs = append(errs, fmt.Sprintf("spec.config: required: a %s broker names a %s (%s) or a %s (%s)",
			classRabbitMQ, kindRabbitmqBrokerConfig, apiRabbitmqBrokerConfig, kindRabbitmqCluster, apiRabbitmqCluster))
	case ref.Kind == kindRabbitmqCluster && ref.APIVersion == apiRabbitmqCluster:
	case ref.Kind == kindRabbitmqBrokerConfig && ref.APIVersion == apiRabbitmqBrokerConfig:
		rns := ref.Namespace
		if rns == "" {
			rns = ns
		}
		s, ok := c.rabbit[rns+"/"+ref.Name]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: %s %s/%s is not in the configuration", refField, kindRabbitmqBrokerConfig, rns, ref.Name))
			break
		}
		out.settings = out.settings.with("spec.queueType", s.QueueType).with("spec.vhost", s.Vhost)
	default:
		errs = append(errs, fmt.Sprintf("%s: %s %q is not supported; a %s broker reads a %s (%s) or a %s (%s)",
			refField, ref.APIVersion, ref.Kind, classRabbitMQ, kindRabbitmqBrokerConfig, apiRabbitmqBrokerConfig, kindRabbitmqCluster, apiRabbitmqCluster))
	}
	if b.externalTopic != "" {
		errs = append(errs, fmt.Sprintf("metadata.annotations.%s: only for a broker of class %s", annotationExternalTopic, classKafka))
	}
	if b.backend != "" && b.backend != ChannelRabbitMQ {
		errs = append(errs, fmt.Sprintf("metadata.annotations.%s: %q conflicts with the %s backend that broker class %s means",
			annotationChannel, b.backend, ChannelRabbitMQ, classRabbitMQ))
	}
	return out, errs
}
