package config

import (
	"maps"
	"strings"
	"testing"
)

// TestRabbitMQBroker: a broker of class RabbitMQBroker runs on the rabbitmq channel with
// the queue type and vhost of the RabbitmqBrokerConfig its spec.config names; what cannot
// be honoured makes it (or the config) not ready, naming the field.
func TestRabbitMQBroker(t *testing.T) {
	const (
		rmqConfig = "---\napiVersion: eventing.knative.dev/v1alpha1\nkind: RabbitmqBrokerConfig\nmetadata: {name: %s, namespace: shop}\nspec: %s\n"
		broker    = "---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: shop, annotations: {eventing.knative.dev/broker.class: RabbitMQBroker%s}}\nspec: %s\n"
	)
	brokerOn := func(ann, config string) string {
		return strings.Replace(strings.Replace(broker, "%s", ann, 1), "%s", "{config: "+config+"}", 1)
	}
	cfgObj := func(name, spec string) string {
		return strings.Replace(strings.Replace(rmqConfig, "%s", name, 1), "%s", spec, 1)
	}
	ref := "{apiVersion: eventing.knative.dev/v1alpha1, kind: RabbitmqBrokerConfig, name: rc, namespace: shop}"
	for _, tt := range []struct {
		name     string
		yaml     string
		key      string   // the object whose reason is checked ("": the broker is ready)
		reason   string   // in its reason
		settings Settings // of a ready broker
	}{
		{"config with queue type and vhost",
			cfgObj("rc", "{rabbitmqClusterReference: {name: rabbitmq, namespace: rabbitmq}, queueType: classic, vhost: events}") + brokerOn("", ref),
			"", "", Settings{"spec.queueType": "classic", "spec.vhost": "events"}},
		{"config by connection secret, defaults",
			cfgObj("rc", "{rabbitmqClusterReference: {connectionSecret: {name: rabbit-secret}}}") + brokerOn("", ref),
			"", "", nil},
		{"config without namespace: the broker's",
			cfgObj("rc", "{rabbitmqClusterReference: {name: rabbitmq}}") + brokerOn("", "{apiVersion: eventing.knative.dev/v1alpha1, kind: RabbitmqBrokerConfig, name: rc}"),
			"", "", nil},
		{"a RabbitmqCluster",
			brokerOn("", "{apiVersion: rabbitmq.com/v1beta1, kind: RabbitmqCluster, name: rabbitmq, namespace: shop}"),
			"", "", nil},
		{"no config",
			"apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: shop, annotations: {eventing.knative.dev/broker.class: RabbitMQBroker}}\n",
			"Broker shop/b", "spec.config: required: a RabbitMQBroker broker names a RabbitmqBrokerConfig (eventing.knative.dev/v1alpha1) or a RabbitmqCluster (rabbitmq.com/v1beta1)", nil},
		{"config not in the configuration",
			brokerOn("", ref),
			"Broker shop/b", "spec.config: RabbitmqBrokerConfig shop/rc is not in the configuration", nil},
		{"a ConfigMap",
			brokerOn("", "{apiVersion: v1, kind: ConfigMap, name: cm}"),
			"Broker shop/b", `spec.config: v1 "ConfigMap" is not supported; a RabbitMQBroker broker reads a RabbitmqBrokerConfig`, nil},
		{"another backend annotated",
			cfgObj("rc", "{rabbitmqClusterReference: {name: rabbitmq}}") + brokerOn(", sluice.dev/channel: kafka", ref),
			"Broker shop/b", `metadata.annotations.sluice.dev/channel: "kafka" conflicts with the rabbitmq backend that broker class RabbitMQBroker means`, nil},
		{"an unknown queue type",
			cfgObj("rc", "{rabbitmqClusterReference: {name: rabbitmq}, queueType: lazy}"),
			"RabbitmqBrokerConfig shop/rc", `spec.queueType: "lazy" is not quorum or classic`, nil},
		{"no cluster reference",
			cfgObj("rc", "{queueType: quorum}"),
			"RabbitmqBrokerConfig shop/rc", "spec.rabbitmqClusterReference: required", nil},
		{"name and secret",
			cfgObj("rc", "{rabbitmqClusterReference: {name: r, connectionSecret: {name: s}}}"),
			"RabbitmqBrokerConfig shop/rc", "spec.rabbitmqClusterReference: give name or connectionSecret, not both", nil},
		{"an unknown field",
			cfgObj("rc", "{rabbitmqClusterReference: {name: r}, rabbitmqResourcesConfig: {exchangeName: x}}"),
			"RabbitmqBrokerConfig shop/rc", "spec.rabbitmqResourcesConfig: unknown field", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := readYAML(t, tt.yaml)
			if tt.key != "" {
				if o := status(t, cfg, tt.key); o.Ready || !strings.Contains(o.Reason, tt.reason) {
					t.Fatalf("%s: ready %v, reason %q, want %q", tt.key, o.Ready, o.Reason, tt.reason)
				}
				return
			}
			if o := status(t, cfg, "Broker shop/b"); !o.Ready {
				t.Fatalf("not ready: %s", o.Reason)
			}
			b := cfg.Brokers[0]
			if b.Channel != ChannelRabbitMQ || b.Class != classRabbitMQ || !maps.Equal(b.Settings, tt.settings) {
				t.Fatalf("broker %+v, want the rabbitmq channel, class RabbitMQBroker, settings %v", b, tt.settings)
			}
		})
	}
}
