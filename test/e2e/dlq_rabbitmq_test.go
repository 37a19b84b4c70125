package e2e

import (
	"fmt"
	"testing"
	"time"
)

// The dead-letter store on RabbitMQ (the private node of scripts/rabbitmq.sh): the
// broker's stream <exchange>.dlq. Each test runs in a namespace of its own, so its
// exchange, queues and streams are new.

// TestDLQRabbitMQ is TestDLQJetStream on RabbitMQ: kept with why, listed durable,
// redriven, purged.
func TestDLQRabbitMQ(t *testing.T) {
	runDLQ(t, fmt.Sprintf("dlq%d", time.Now().UnixNano()), true, rabbitmqArgs(t)...)
}

// TestDLQRabbitMQKilledMidRedrive is TestDLQJetStreamKilledMidRedrive on RabbitMQ:
// kill -9 in the middle of a redrive loses nothing.
func TestDLQRabbitMQKilledMidRedrive(t *testing.T) {
	runDLQKilledMidRedrive(t, fmt.Sprintf("dlqkill%d", time.Now().UnixNano()), rabbitmqArgs(t)...)
}

// TestDLQRabbitMQReplicasShareStore is TestDLQJetStreamReplicasShareStore on RabbitMQ:
// two replicas of one broker on one node list and redrive the same store.
func TestDLQRabbitMQReplicasShareStore(t *testing.T) {
	runDLQReplicasShareStore(t, fmt.Sprintf("dlqrep%d", time.Now().UnixNano()), rabbitmqArgs(t)...)
}
