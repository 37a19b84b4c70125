package e2e

import (
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
)

// TestRabbitMQCrash: kill -9 and restart on the RabbitMQ channel (the private node of
// scripts/rabbitmq.sh); every event that got 202 is delivered. Each run uses a namespace
// of its own, so its exchange and queues are new.
func TestRabbitMQCrash(t *testing.T) {
	runCrashTest(t, fmt.Sprintf("crash%d", time.Now().UnixNano()), false, 2000, rabbitmqArgs(t)...)
}

// TestRabbitMQCrashDeadLetter is TestJetStreamCrashDeadLetter on RabbitMQ.
func TestRabbitMQCrashDeadLetter(t *testing.T) {
	runCrashTest(t, fmt.Sprintf("crashdl%d", time.Now().UnixNano()), true, 2000, rabbitmqArgs(t)...)
}

func rabbitmqArgs(t *testing.T) []string {
	return []string{"--channel", "rabbitmq", "--rabbitmq-url", rabbitmqtest.URL(t)}
}

// TestRabbitMQBrokerClass runs Knative RabbitMQ brokers (class RabbitMQBroker) on the
// RabbitMQ of scripts/rabbitmq.sh: one whose RabbitmqBrokerConfig asks for classic queues
// on the default vhost, one naming a RabbitmqCluster (quorum queues, the default). Both
// deliver; the queue of each one's trigger has the type asked for (declaring it again as a quorum
// queue is refused for the classic one only).
func TestRabbitMQBrokerClass(t *testing.T) {
	url := rabbitmqtest.URL(t)
	ns := fmt.Sprintf("rc%d", time.Now().UnixNano())
	subClassic := newSubscriber(t, nil)
	subQuorum := newSubscriber(t, nil)
	cfg := writeConfig(t, fmt.Sprintf(`apiVersion: eventing.knative.dev/v1alpha1
kind: RabbitmqBrokerConfig
metadata: {name: classic, namespace: %[1]s}
spec:
  rabbitmqClusterReference: {name: rabbitmq, namespace: rabbitmq}
  queueType: classic
  vhost: /
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: classic
  namespace: %[1]s
  annotations: {eventing.knative.dev/broker.class: RabbitMQBroker}
spec:
  config: {apiVersion: eventing.knative.dev/v1alpha1, kind: RabbitmqBrokerConfig, name: classic, namespace: %[1]s}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: quorum
  namespace: %[1]s
  annotations: {eventing.knative.dev/broker.class: RabbitMQBroker}
spec:
  config: {apiVersion: rabbitmq.com/v1beta1, kind: RabbitmqCluster, name: rabbitmq, namespace: rabbitmq}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: classic, namespace: %[1]s}
spec: {broker: classic, subscriber: {uri: %[2]q}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: quorum, namespace: %[1]s}
spec: {broker: quorum, subscriber: {uri: %[3]q}}
`, ns, subClassic.URL, subQuorum.URL))
	b := startBroker(t, "--config", cfg, "--rabbitmq-url", url)
	for i := 0; i < 5; i++ {
		for _, name := range []string{"classic", "quorum"} {
			if st, body := postBinary(t, b.base+"/"+ns+"/"+name, ceHeaders(fmt.Sprint(name, i), "t"), []byte(`{}`)); st != 202 {
				t.Fatalf("ingest %s: %d %s", name, st, body)
			}
		}
	}
	subClassic.waitFor(t, 5, 30*time.Second)
	subQuorum.waitFor(t, 5, 30*time.Second)

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for name, classic := range map[string]bool{"classic": true, "quorum": false} {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		queue := "sluice." + ns + "." + name + "/" + ns + "/" + name // docs/channels-rabbitmq.md, Layout
		_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		var aerr *amqp.Error
		if refused := errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed; refused != classic {
			t.Errorf("broker %s: declaring %s as a quorum queue: %v; want refused: %v", name, queue, err, classic)
		}
		if err == nil {
			ch.Close()
		}
	}
}
