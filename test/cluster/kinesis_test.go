package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// kinesisArgs are the flags of a replica on the Kinesis-compatible server with the lease
// table table on the DynamoDB-compatible one: 6 shards (2 per replica), 3 s leases.
func kinesisArgs(t *testing.T, table string) []string {
	// The local servers accept any credentials; the SDK's chain finds these.
	t.Setenv("AWS_ACCESS_KEY_ID", "sluice")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sluice")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return []string{"--channel", "kinesis", "--kinesis-endpoint", kinesisURL, "--kinesis-region", "us-east-1",
		"--kinesis-shards", "6", "--kinesis-lease-table", table, "--dynamodb-endpoint", dynamoURL,
		"--kinesis-lease-duration", "3s"}
}

// TestKinesisReplicaKill: 3 replicas on one Kinesis stream (6 shards) share its shards
// through a DynamoDB lease table; kill -9 one of them mid-load. Every event that got a
// 202 is delivered: the dead replica's leases expire after 3 s and the survivors take
// its shards over from their checkpoints. Every live replica delivers a share.
func TestKinesisReplicaKill(t *testing.T) {
	need(t, "a Kinesis- and a DynamoDB-compatible server (scripts/kinesis.sh, scripts/dynalite.sh)", dynamoURL, kinesisErr)
	ns := fmt.Sprintf("kin%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteStream(t, "sluice."+ns+".default") })
	replicas := replicaTest{
		Namespace: ns, Args: kinesisArgs(t, "sluice-leases-"+ns), Replicas: 3,
		Rate: 300, Load: 12 * time.Second, Latency: 10 * time.Millisecond,
		Faults:   []fault{{After: 4 * time.Second, Name: "kill -9 replica 1", Do: killReplica(0)}},
		Recovery: 90 * time.Second,
	}.run(t)
	// Events go to random shards: those accepted after the kill on the dead replica's
	// shards were delivered only because a survivor took its leases over, which it logs.
	for _, r := range replicas[1:] {
		t.Logf("replica %d: %d leases taken", r.n, strings.Count(r.logs.String(), "kinesis: lease taken"))
	}
}

// deleteStream deletes a stream of the Kinesis-compatible server (which accepts any
// signature), so that runs do not pile up shards.
func deleteStream(t *testing.T, stream string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, kinesisURL+"/",
		strings.NewReader(fmt.Sprintf(`{"StreamName":%q,"EnforceConsumerDeletion":true}`, stream)))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "Kinesis_20131202.DeleteStream")
	req.Header.Set("X-Amz-Date", "20260101T000000Z")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=sluice/20260101/us-east-1/kinesis/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("deleting stream %s: %v", stream, err)
		return
	}
	resp.Body.Close()
}
