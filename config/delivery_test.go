package config

import (
	"strings"
	"testing"
	"time"
)

// triggerOf returns the trigger or subscription at key ("ns/name") of cfg.
func triggerOf(t *testing.T, cfg *Config, key string) Trigger {
	t.Helper()
	for _, b := range cfg.Brokers {
		for _, tr := range b.Triggers {
			if tr.Key() == key {
				return tr
			}
		}
	}
	t.Fatalf("no trigger %s; objects %+v", key, cfg.Objects)
	return Trigger{}
}

// TestDeliveryFormat: a DeliverySpec's format (json: structured, binary: the default)
// is honoured field by field like the rest of delivery; any other value is refused
// naming the field.
func TestDeliveryFormat(t *testing.T) {
	broker := func(delivery string) string {
		return "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: shop}\nspec: {delivery: {" + delivery + "}}\n"
	}
	trigger := func(delivery string) string {
		return "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: shop}\nspec: {broker: b, subscriber: {uri: \"http://a/\"}, delivery: {" + delivery + "}}\n"
	}
	tests := []struct {
		name, yaml, key, want, notReady string
	}{
		{"the broker's json", broker("format: json") + trigger(""), "shop/t", FormatJSON, ""},
		{"the trigger's binary over the broker's json", broker("format: json") + trigger("format: binary"), "shop/t", "", ""},
		{"the trigger's json", broker("") + trigger("format: json"), "shop/t", FormatJSON, ""},
		{"none: binary", broker("") + trigger(""), "shop/t", "", ""},
		{"a subscription's json", "apiVersion: messaging.knative.dev/v1\nkind: InMemoryChannel\nmetadata: {name: c, namespace: shop}\n---\n" +
			"apiVersion: messaging.knative.dev/v1\nkind: Subscription\nmetadata: {name: s, namespace: shop}\n" +
			"spec: {channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: c}, subscriber: {uri: \"http://a/\"}, delivery: {format: json}}\n",
			"shop/s", FormatJSON, ""},
		{"an unknown format", broker("") + trigger("format: xml"), "Trigger shop/t", "", `spec.delivery.format: "xml" is not binary or json`},
		{"Knative's spelling only", broker("format: JSON") + trigger(""), "Broker shop/b", "", `spec.delivery.format: "JSON" is not binary or json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := readYAML(t, tt.yaml)
			if tt.notReady != "" {
				if o := status(t, cfg, tt.key); o.Ready || !strings.Contains(o.Reason, tt.notReady) {
					t.Errorf("ready %v, reason %q; want %q", o.Ready, o.Reason, tt.notReady)
				}
				return
			}
			if got := triggerOf(t, cfg, tt.key).Delivery.Format; got != tt.want {
				t.Errorf("format %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBrokerDefaultsDelivery: config-br-defaults' delivery is the delivery of a Broker
// without spec.delivery, from the entry Knative's webhook picks; of it Knative copies
// deadLetterSink, retry, backoffPolicy and backoffDelay, and the other fields are
// refused naming them.
func TestBrokerDefaultsDelivery(t *testing.T) {
	defaults := func(cluster, namespaces string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-br-defaults, namespace: knative-eventing}\ndata:\n  default-br-config: |\n" +
			"    clusterDefault: {brokerClass: MTChannelBasedBroker, apiVersion: v1, kind: ConfigMap, name: config-br-default-channel, namespace: knative-eventing" + cluster + "}\n" +
			"    namespaceDefaults:\n" + namespaces
	}
	const cluster = ", delivery: {retry: 7, backoffPolicy: linear, backoffDelay: PT1S, deadLetterSink: {uri: \"http://dls/\"}}"
	const other = "      other: {brokerClass: MTChannelBasedBroker, delivery: {retry: 2}}\n"
	broker := func(ns, ann, spec string) string {
		return "---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: " + ns + ", annotations: {" + ann + "}}\n" + spec +
			"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: " + ns + "}\nspec: {broker: b, subscriber: {uri: \"http://a/\"}}\n"
	}
	def := DefaultDelivery()
	clusterWant := def
	clusterWant.Retry, clusterWant.BackoffPolicy, clusterWant.BackoffDelay, clusterWant.DeadLetterSink = 7, BackoffLinear, time.Second, "http://dls/"
	otherWant := def
	otherWant.Retry = 2
	ownWant := def
	ownWant.Retry = 1
	tests := []struct {
		name, yaml, key string
		want            Delivery
		notReady        string
	}{
		{name: "clusterDefault's", yaml: defaults(cluster, other) + broker("shop", "", ""), key: "shop/t", want: clusterWant},
		{name: "a Broker's own spec.delivery replaces it whole", yaml: defaults(cluster, other) + broker("shop", "", "spec: {delivery: {retry: 1}}\n"), key: "shop/t", want: ownWant},
		{name: "the namespace's entry", yaml: defaults(cluster, other) + broker("other", "", ""), key: "other/t", want: otherWant},
		{name: "the namespace's entry is for its class only", yaml: defaults(cluster, other) + broker("other", "eventing.knative.dev/broker.class: Kafka", ""), key: "other/t", want: clusterWant},
		{name: "a namespace's entry without a class is for clusterDefault's", yaml: defaults(cluster, other+"      third: {delivery: {retry: 2}}\n") + broker("third", "", ""), key: "third/t", want: otherWant},
		{name: "no delivery in the defaults", yaml: defaults("", "      {}\n") + broker("shop", "", ""), key: "shop/t", want: def},
		{name: "timeout is not copied by Knative: refused", yaml: defaults(", delivery: {timeout: PT5S}", other) + broker("shop", "", ""), key: "Broker shop/b",
			notReady: "ConfigMap knative-eventing/config-br-defaults: data.default-br-config.clusterDefault.delivery.timeout: Knative's defaults do not give a Broker this field"},
		{name: "a bad value names the ConfigMap's field", yaml: defaults(", delivery: {retry: -1}", other) + broker("shop", "", ""), key: "Broker shop/b",
			notReady: "ConfigMap knative-eventing/config-br-defaults: data.default-br-config.clusterDefault.delivery.retry: -1 is negative"},
		{name: "an unknown field", yaml: defaults(", delivery: {retries: 1}", other) + broker("shop", "", ""), key: "Broker shop/b",
			notReady: "ConfigMap knative-eventing/config-br-defaults: data.default-br-config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := readYAML(t, tt.yaml)
			if tt.notReady != "" {
				if o := status(t, cfg, tt.key); o.Ready || !strings.Contains(o.Reason, tt.notReady) {
					t.Errorf("ready %v, reason %q; want %q", o.Ready, o.Reason, tt.notReady)
				}
				return
			}
			if got := triggerOf(t, cfg, tt.key).Delivery; got != tt.want {
				t.Errorf("delivery %v, want %v", got, tt.want)
			}
		})
	}
}
