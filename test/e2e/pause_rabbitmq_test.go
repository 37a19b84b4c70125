package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestPauseRabbitMQReplicasShare is TestPauseJetStreamReplicasShare on RabbitMQ (the
// private node of scripts/rabbitmq.sh), in a namespace of its own, so its exchange,
// queues and state stream are new: a pause made through one replica is seen by the
// other, and by the first after its restart, from the broker's state stream.
func TestPauseRabbitMQReplicasShare(t *testing.T) {
	// Each replica's depth is the queue's ready messages plus those it holds unsettled:
	// together they hold all of them.
	runPauseReplicas(t, fmt.Sprintf("pause%d", time.Now().UnixNano()), func(a, b float64) bool { return a+b >= 20 }, rabbitmqArgs(t)...)
}
