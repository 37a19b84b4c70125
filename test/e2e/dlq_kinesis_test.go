package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/kinesis/kinesistest"
)

// dlqKinesisArgs are kinesisArgs with a lease table of their own (on the server of
// scripts/dynalite.sh) instead of a checkpoint directory: the dead-letter store lives in
// that table.
func dlqKinesisArgs(t *testing.T) []string {
	args := kinesisArgs(t)
	args = args[:len(args)-2] // its --kinesis-checkpoint-dir: the lease table holds the checkpoints
	return append(args, "--kinesis-lease-table", fmt.Sprintf("sluice-e2e-dlq-%d", time.Now().UnixNano()),
		"--dynamodb-endpoint", kinesistest.DynamoDBEndpoint(t))
}

// TestDLQKinesis is TestDLQJetStream on Kinesis with a lease table (durable store), in
// a namespace (so a stream) of its own.
func TestDLQKinesis(t *testing.T) {
	runDLQ(t, fmt.Sprintf("dlqk%d", time.Now().UnixNano()), true, dlqKinesisArgs(t)...)
}

// TestDLQKinesisCheckpointFiles: on Kinesis with checkpoint files and no lease table,
// the store is in memory (durable false) and works as on the memory channel.
func TestDLQKinesisCheckpointFiles(t *testing.T) {
	runDLQ(t, fmt.Sprintf("dlqkf%d", time.Now().UnixNano()), false, kinesisArgs(t)...)
}

// TestDLQKinesisKilledMidRedrive is TestDLQJetStreamKilledMidRedrive on Kinesis with a
// lease table: kill -9 in the middle of a redrive loses no dead letter.
func TestDLQKinesisKilledMidRedrive(t *testing.T) {
	runDLQKilledMidRedrive(t, fmt.Sprintf("dlqkkill%d", time.Now().UnixNano()), dlqKinesisArgs(t)...)
}

// TestDLQKinesisReplicasShareStore is TestDLQJetStreamReplicasShareStore on Kinesis:
// two replicas of one broker with one lease table. The stream has one shard, so one
// replica reads it and the other has none to steal: a steal while the replicas balance
// hands records read and not yet checkpointed to the other replica, which delivers (and
// dead-letters) them again, and the test counts every entry.
func TestDLQKinesisReplicasShareStore(t *testing.T) {
	runDLQReplicasShareStore(t, fmt.Sprintf("dlqkrep%d", time.Now().UnixNano()), append(dlqKinesisArgs(t), "--kinesis-shards", "1")...)
}
