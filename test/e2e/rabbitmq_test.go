package e2e

import (
	"fmt"
	"testing"
	"time"

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
