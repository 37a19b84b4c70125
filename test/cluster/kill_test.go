package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// jetstreamArgs are the flags of a replica on the NATS cluster: a 5 s ack wait, so the
// events a killed replica held are redelivered 5 s after it died, and extra.
func jetstreamArgs(urls string, extra ...string) []string {
	return append([]string{"--channel", "jetstream", "--nats-url", urls, "--jetstream-ack-wait", "5s"}, extra...)
}

// TestJetStreamReplicaKill: 3 replicas on a 3-node NATS cluster share one trigger's
// durable consumer; kill -9 one of them mid-load. Every event that got a 202 is
// delivered; what the dead replica held comes back after the ack wait.
func TestJetStreamReplicaKill(t *testing.T) {
	urls := need(t, "a NATS cluster (scripts/nats-cluster.sh)", natsURLs, natsErr)
	ns := fmt.Sprintf("jsr%d", time.Now().UnixNano())
	replicaTest{
		Namespace: ns, Args: jetstreamArgs(urls, "--jetstream-replicas", "3"), Replicas: 3,
		Rate: 1000, Load: 10 * time.Second, Latency: 10 * time.Millisecond,
		Faults:   []fault{{After: 4 * time.Second, Name: "kill -9 replica 1", Do: killReplica(0)}},
		Recovery: 60 * time.Second,
	}.run(t)
	checkStream(t, urls, ns)
}

// TestJetStreamNodeKill: the same 3 replicas, with the default stream replicas (R3 on a
// 3-node cluster), while the NATS node leading the broker's stream is killed with SIGKILL
// mid-load: the other two elect a new leader and keep every acknowledged event; replicas
// connected to the dead node reconnect to another.
func TestJetStreamNodeKill(t *testing.T) {
	urls := need(t, "a NATS cluster (scripts/nats-cluster.sh)", natsURLs, natsErr)
	ns := fmt.Sprintf("jsn%d", time.Now().UnixNano())
	killed := 0
	t.Cleanup(func() {
		if killed > 0 {
			if _, err := script("scripts/nats-cluster.sh", "restart", strconv.Itoa(killed)); err != nil {
				t.Errorf("restarting NATS node %d: %v", killed, err)
			}
		}
	})
	replicaTest{
		Namespace: ns, Args: jetstreamArgs(urls), Replicas: 3,
		// 12 s of load after the kill: the stream elects a new leader within its Raft
		// election timeout (4-9 s), then ingress accepts again.
		Rate: 1000, Load: 16 * time.Second, Latency: 10 * time.Millisecond,
		Faults: []fault{{After: 4 * time.Second, Name: "kill -9 the stream's leader NATS node", Do: func(t *testing.T, _ []*replica) {
			killed = streamLeader(t, urls, ns)
			if _, err := script("scripts/nats-cluster.sh", "kill", strconv.Itoa(killed)); err != nil {
				t.Errorf("killing NATS node %d: %v", killed, err)
			}
			t.Logf("killed NATS node n%d", killed)
		}}},
		Recovery: 60 * time.Second,
	}.run(t)
	checkStream(t, urls, ns)
}

// streamInfo returns the info of the stream of broker ns/default.
func streamInfo(t *testing.T, urls, ns string) *jetstream.StreamInfo {
	t.Helper()
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	streams := js.ListStreams(ctx)
	for si := range streams.Info() {
		if si.Config.Metadata["sluice.broker"] == ns+"/default" {
			return si
		}
	}
	t.Fatalf("no stream of broker %s/default (%v)", ns, streams.Err())
	return nil
}

// streamLeader returns the number of the NATS node (n1, n2, n3) leading the stream of
// broker ns/default.
func streamLeader(t *testing.T, urls, ns string) int {
	si := streamInfo(t, urls, ns)
	if si.Cluster == nil {
		t.Fatal("the stream has no cluster info")
	}
	n, err := strconv.Atoi(strings.TrimPrefix(si.Cluster.Leader, "n"))
	if err != nil {
		t.Fatalf("stream leader %q: %v", si.Cluster.Leader, err)
	}
	return n
}

// checkStream checks that the broker's stream has 3 replicas (--jetstream-replicas 3, or
// its default on a 3-node cluster).
func checkStream(t *testing.T, urls, ns string) {
	si := streamInfo(t, urls, ns)
	if si.Config.Replicas != 3 {
		t.Errorf("the stream has %d replicas, want 3", si.Config.Replicas)
	}
	t.Logf("stream %s: %d replicas, leader %s", si.Config.Name, si.Config.Replicas, si.Cluster.Leader)
}

// TestKafkaReplicaAndBrokerKill: 3 replicas on a 3-broker Kafka cluster (KRaft), the
// broker's topic created by Sluice with its defaults (8 partitions, the cluster's
// replication factor: 3, min.insync.replicas 2); kill -9 one replica mid-load, then one Kafka
// broker. Every event that got a 202 is delivered: the dead replica's partitions move to
// the survivors after the group session timeout (10 s), and the partitions the dead
// broker led get new leaders holding every acknowledged record.
func TestKafkaReplicaAndBrokerKill(t *testing.T) {
	brokers := need(t, "a Kafka cluster (scripts/kafka.sh start-cluster)", kafkaBrokers, kafkaErr)
	ns := fmt.Sprintf("kr%d", time.Now().UnixNano())
	killedBroker := 0
	t.Cleanup(func() {
		if killedBroker > 0 {
			if _, err := script("scripts/kafka.sh", "restart-node", strconv.Itoa(killedBroker)); err != nil {
				t.Errorf("restarting Kafka broker %d: %v", killedBroker, err)
			}
		}
	})
	replicas := replicaTest{
		Namespace: ns, Args: []string{"--channel", "kafka", "--kafka-brokers", brokers}, Replicas: 3,
		Rate: 1000, Load: 16 * time.Second, Latency: 10 * time.Millisecond,
		Faults: []fault{
			{After: 3 * time.Second, Name: "kill -9 replica 1", Do: killReplica(0)},
			{After: 7 * time.Second, Name: "kill -9 Kafka broker 2", Do: func(t *testing.T, _ []*replica) {
				killedBroker = 2
				if _, err := script("scripts/kafka.sh", "kill-node", "2"); err != nil {
					t.Errorf("killing Kafka broker 2: %v", err)
				}
			}},
		},
		Recovery: 90 * time.Second,
	}.run(t)
	// The survivors logged what they own after the rebalance that followed the kill.
	for _, r := range replicas[1:] {
		var last string
		for _, line := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(line, "kafka: partitions assigned") {
				last = line
			}
		}
		if strings.Count(r.logs.String(), "kafka: partitions assigned") < 2 {
			t.Errorf("replica %d logged no rebalance after the kill:\n%s", r.n, r.logs)
		} else {
			t.Logf("replica %d after the rebalance: %s", r.n, last[strings.Index(last, "msg="):])
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topic := "sluice." + ns + ".default"
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	d := td[topic]
	if len(d.Partitions) != 8 || d.Partitions.NumReplicas() != 3 {
		t.Errorf("topic %s: %d partitions of %d replicas, want 8 of 3", topic, len(d.Partitions), d.Partitions.NumReplicas())
	}
}
