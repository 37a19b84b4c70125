package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-broker/sluice/loadtest/cevent"
)

// Scenario names, in the order they run.
const (
	scDirect    = "direct"
	scMemory    = "memory"
	scFanout    = "fanout"
	scFilter    = "filter"
	scJetStream = "jetstream"
	scKafka     = "kafka"
	scBatch     = "batch"
	scOverload  = "overload"
	scFloor     = "floor"
)

// allScenarios is the default --scenarios list.
var allScenarios = []string{scDirect, scMemory, scFanout, scFilter, scJetStream, scKafka, scBatch, scOverload, scFloor}

// scenario describes one broker set-up to ramp.
type scenario struct {
	Name        string
	Title       string
	Channel     string // memory, jetstream, kafka; "" for direct
	Triggers    int    // triggers in the config
	Matching    int    // of those, how many match the load's type (each has its own receiver)
	StartRate   float64
	Description string
	// Batch, when > 0, annotates every trigger with sluice.dev/delivery-batch: Batch
	// and sluice.dev/delivery-batch-wait: BatchWait (docs/delivery.md).
	Batch     int    `json:",omitempty"`
	BatchWait string `json:",omitempty"`
}

// scenarioByName returns the set-up of a ramped scenario (not batch, overload or floor).
func scenarioByName(name string) (scenario, bool) {
	switch name {
	case scDirect:
		return scenario{Name: name, Title: "direct (no broker)", StartRate: 1000,
			Description: "load generator → receiver, no broker: the ceiling of this machine"}, true
	case scMemory:
		return scenario{Name: name, Title: "memory broker, 1 trigger", Channel: "memory", Triggers: 1, Matching: 1, StartRate: 1000,
			Description: "memory channel, one trigger with an exact type filter"}, true
	case scFanout:
		return scenario{Name: name, Title: "fan-out, 10 triggers", Channel: "memory", Triggers: 10, Matching: 10, StartRate: 200,
			Description: "memory channel, 10 triggers all matching, each to its own receiver (rates are events/s in; deliveries are 10×)"}, true
	case scFilter:
		return scenario{Name: name, Title: "filter cost, 100 triggers", Channel: "memory", Triggers: 100, Matching: 1, StartRate: 1000,
			Description: "memory channel, 100 triggers with distinct exact type filters, one matching"}, true
	case scJetStream:
		return scenario{Name: name, Title: "jetstream channel, 1 trigger", Channel: "jetstream", Triggers: 1, Matching: 1, StartRate: 500,
			Description: "embedded JetStream (files in a temp --data-dir), one trigger"}, true
	case scKafka:
		return scenario{Name: name, Title: "kafka channel, 1 trigger", Channel: "kafka", Triggers: 1, Matching: 1, StartRate: 500,
			Description: "Kafka (scripts/kafka.sh, one KRaft node on this machine), one trigger"}, true
	}
	return scenario{}, false
}

// brokerConfig renders the Knative manifests of a scenario: one Broker named
// brokerName in namespace "bench", sc.Triggers triggers of which the first sc.Matching
// match the load's event type and deliver to receivers[i]; the others filter on
// distinct types nothing sends and point at receivers[0]. With sc.Batch > 0 every
// trigger carries the batched-delivery annotations.
func brokerConfig(sc scenario, brokerName string, receivers []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: %s
  namespace: bench
spec:
  delivery:
    retry: 3
    backoffPolicy: exponential
    backoffDelay: PT0.2S
    timeout: PT10S
`, brokerName)
	for i := 0; i < sc.Triggers; i++ {
		typ, rcv := cevent.DefaultType, receivers[0]
		if i < sc.Matching {
			rcv = receivers[i]
		} else {
			typ = fmt.Sprintf("%s.unmatched%03d", cevent.DefaultType, i)
		}
		fmt.Fprintf(&b, `---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata:
  name: t%03d
  namespace: bench
`, i)
		if sc.Batch > 0 {
			fmt.Fprintf(&b, "  annotations:\n    sluice.dev/delivery-batch: %q\n", strconv.Itoa(sc.Batch))
			if sc.BatchWait != "" {
				fmt.Fprintf(&b, "    sluice.dev/delivery-batch-wait: %s\n", sc.BatchWait)
			}
		}
		fmt.Fprintf(&b, `spec:
  broker: %s
  filter:
    attributes:
      type: %s
  subscriber:
    uri: %s
`, brokerName, typ, rcv)
	}
	return b.String()
}
