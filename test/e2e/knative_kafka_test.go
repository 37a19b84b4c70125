package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel/kafka/kafkatest"
)

// TestKafkaBrokerClass runs Knative Kafka brokers on a real Kafka (scripts/kafka.sh)
// with no --kafka-brokers flag: the cluster, the partition count and the replication
// factor come from the ConfigMap the Brokers' spec.config names, as in Knative. One
// broker uses an existing topic as it is (kafka.eventing.knative.dev/external.topic);
// the other gets a topic Sluice creates with the ConfigMap's settings.
func TestKafkaBrokerClass(t *testing.T) {
	seeds := kafkatest.Brokers(t)
	ns := fmt.Sprintf("kc%d", time.Now().UnixNano())
	external := "knative-external-" + ns
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, external); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), external, "sluice."+ns+".own")

	subOwn := newSubscriber(t, nil)
	subExt := newSubscriber(t, nil)
	cfg := writeConfig(t, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: my-kafka, namespace: %[1]s}
data:
  bootstrap.servers: %[2]q
  default.topic.partitions: "3"
  default.topic.replication.factor: "1"
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: own
  namespace: %[1]s
  annotations: {eventing.knative.dev/broker.class: Kafka}
spec:
  config: {apiVersion: v1, kind: ConfigMap, name: my-kafka}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: ext
  namespace: %[1]s
  annotations:
    eventing.knative.dev/broker.class: Kafka
    kafka.eventing.knative.dev/external.topic: %[3]s
spec:
  config: {apiVersion: v1, kind: ConfigMap, name: my-kafka}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: own, namespace: %[1]s}
spec: {broker: own, subscriber: {uri: %[4]q}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: ext, namespace: %[1]s}
spec: {broker: ext, subscriber: {uri: %[5]q}}
`, ns, strings.Join(seeds, ","), external, subOwn.URL, subExt.URL))
	b := startBroker(t, "--config", cfg)
	for i := 0; i < 5; i++ {
		for _, name := range []string{"own", "ext"} {
			if st, body := postBinary(t, b.base+"/"+ns+"/"+name, ceHeaders(fmt.Sprint(name, i), "t"), []byte(`{}`)); st != 202 {
				t.Fatalf("ingest %s: %d %s", name, st, body)
			}
		}
	}
	subOwn.waitFor(t, 5, 30*time.Second)
	subExt.waitFor(t, 5, 30*time.Second)

	ends, err := adm.ListEndOffsets(ctx, external)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	if n != 5 {
		t.Errorf("external topic %s holds %d records, want the 5 events", external, n)
	}
	td, err := adm.ListTopics(ctx, "sluice."+ns+".own", "sluice."+ns+".ext")
	if err != nil {
		t.Fatal(err)
	}
	if own, ok := td["sluice."+ns+".own"]; !ok || own.Err != nil || len(own.Partitions) != 3 {
		t.Errorf("topic of broker own: %+v, want 3 partitions (the ConfigMap's)", own)
	}
	if ext, ok := td["sluice."+ns+".ext"]; ok && ext.Err == nil {
		t.Errorf("a topic was created for the broker with an external topic")
	}
}
