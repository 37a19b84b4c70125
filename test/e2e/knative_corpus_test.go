package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// corpusDir holds real Knative manifests collected from public Knative material (each
// file names its source in a header comment); none was written for Sluice.
const corpusDir = "../testdata/knative"

// objectStatus is the part of `sluice validate -o json` the corpus test reads.
type objectStatus struct {
	Kind, Namespace, Name, File, Reason, Channel, Address string
	Ready, Skipped                                        bool
	Refs                                                  []struct{ Field, URL, Via string }
}

// validate runs `sluice validate -o json` on paths (relative to corpusDir) and returns
// the objects and whether it exited 0.
func validate(t *testing.T, paths ...string) ([]objectStatus, bool) {
	t.Helper()
	args := []string{"validate", "-o", "json"}
	for _, p := range paths {
		args = append(args, filepath.Join(corpusDir, p))
	}
	cmd := exec.Command(sluiceBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatal(err)
	}
	var rep struct {
		Ready   bool
		Objects []objectStatus
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("sluice validate %v: %v\n%s%s", paths, jerr, stdout.String(), stderr.String())
	}
	if (err == nil) != rep.Ready {
		t.Errorf("sluice validate %v: exit %v, ready %v", paths, err, rep.Ready)
	}
	return rep.Objects, err == nil
}

// want is what the corpus test asserts of one object: ready or not (with a reason
// fragment), its channel backend, and its resolved destinations.
type want struct {
	notReady string            // a fragment of the reason; "" means ready
	note     string            // a fragment of a ready object's reason, when asserted
	skipped  bool              // a kind Sluice does not run
	channel  *string           // the backend, when asserted ("" is the server's --channel)
	refs     map[string]string // field → URL
}

func ch(s string) *string { return &s }

const (
	in        = "http://127.0.0.1:8080" // validate's default --ingress-url
	svc       = ".default.svc.cluster.local"
	svcDomain = ".svc.cluster.local" // after NAME.NAMESPACE

	// validate runs without --rabbitmq-url: what a rabbitmq broker's readiness depends on.
	rabbitNote = "readiness depends on --rabbitmq-url URL, not given"
	tmpl       = "http://" // the default --ref-url-template: http://NAME.NAMESPACE.svc.cluster.local
)

// TestKnativeCorpus runs `sluice validate` on every manifest of the corpus, each group
// of files together as `kubectl apply -f` would take them, and checks every object:
// whether it is ready, its channel and where its refs resolve (by the default template:
// the in-cluster address Knative would use; or to a broker, channel or flow of the same
// configuration, its Sluice address). Every manifest valid in today's Knative loads; the
// ones that do not are invalid in Knative too, or use API versions Knative removed.
func TestKnativeCorpus(t *testing.T) {
	groups := []struct {
		paths []string
		want  map[string]want // "Kind ns/name" → want
	}{
		{[]string{"bookstore"}, map[string]want{
			"Broker default/bookstore-broker": {channel: ch("")},
			"Trigger default/temp-trigger":    {refs: map[string]string{"spec.subscriber": tmpl + "event-display" + svc}},
			"Trigger default/db-insert-trigger": {refs: map[string]string{
				"spec.subscriber": tmpl + "node-server-svc" + svc + "/insert"}}, // uri resolved against the ref
			"Trigger default/log-trigger":      {refs: map[string]string{"spec.subscriber": tmpl + "event-display" + svc}},
			"Trigger default/sequence-trigger": {refs: map[string]string{"spec.subscriber": in + "/default/sequence-kn-sequence-0"}},
			"Sequence default/sequence": {channel: ch("memory"), refs: map[string]string{
				"spec.steps[0]": tmpl + "bad-word-filter" + svc, "spec.steps[1]": tmpl + "sentiment-analysis-app" + svc,
				"spec.reply": in + "/default/bookstore-broker"}},
		}},
		{[]string{"broker-developer-options"}, map[string]want{
			// Knative's webhook rejects this example too: an interval is not a duration.
			"Broker default/default": {notReady: `spec.delivery.backoffDelay: "2007-03-01T13:00:00Z/P1Y2M10DT2H30M" is not an ISO-8601 duration`},
		}},
		{[]string{"debugging"}, map[string]want{
			"Namespace default/knative-debug":                {skipped: true},
			"ApiServerSource knative-debug/src":              {skipped: true},
			"InMemoryChannel knative-debug/chan":             {channel: ch("memory")},
			"Subscription knative-debug/sub":                 {refs: map[string]string{"spec.subscriber": "http://svc.knative-debug.svc.cluster.local"}},
			"Service knative-debug/svc":                      {skipped: true},
			"Deployment knative-debug/fn":                    {skipped: true},
			"ServiceAccount knative-debug/service-account":   {skipped: true},
			"Role knative-debug/event-watcher":               {skipped: true},
			"RoleBinding knative-debug/k8s-ra-event-watcher": {skipped: true},
		}},
		{[]string{"eventing-kafka-broker"}, map[string]want{
			"ConfigMap knative-eventing/kafka-broker-config":  {},
			"ConfigMap knative-eventing/kafka-channel-config": {},
		}},
		// Knative's stock kafka-broker-config is not in the configuration: the flags.
		{[]string{"kafka-broker"}, map[string]want{
			"Broker default/default": {channel: ch("kafka"), refs: map[string]string{"spec.delivery.deadLetterSink": tmpl + "dlq-service" + svc}},
		}},
		{[]string{"kafka-broker", "kafka-broker-configmap"}, map[string]want{
			"Broker default/default":                         {channel: ch("kafka")},
			"ConfigMap knative-eventing/kafka-broker-config": {},
		}},
		{[]string{"kafka-channel-broker"}, map[string]want{
			"Broker default/kafka-backed-broker":       {channel: ch("kafka")},
			"ConfigMap knative-eventing/kafka-channel": {},
		}},
		// config-br-defaults makes Kafka the class of a Broker that names none.
		{[]string{"kafka-default-class", "meteatamel/broker.yaml"}, map[string]want{
			"ConfigMap knative-eventing/config-br-defaults": {},
			"Broker default/default":                        {channel: ch("kafka")},
		}},
		{[]string{"broker-config/broker-default-channel.yaml"}, map[string]want{
			"Broker default/default": {channel: ch("")}, // stock config-br-default-channel: --channel
		}},
		{[]string{"broker-config/broker-plain.yaml"}, map[string]want{
			"Broker default/default": {channel: ch("")},
		}},
		// config-br-defaults naming the kafka-channel ConfigMap: a Broker without config
		// runs on Kafka.
		{[]string{"broker-config/broker-plain.yaml", "broker-config/config-br-defaults-kafka-channel.yaml", "stock-config/kafka-channel-configmap.yaml"}, map[string]want{
			"Broker default/default":                        {channel: ch("kafka")},
			"ConfigMap knative-eventing/config-br-defaults": {},
			"ConfigMap knative-eventing/kafka-channel":      {},
		}},
		// The defaults name a ConfigMap that is not there (Knative's Broker would not be
		// ready either) or a class no broker implements.
		{[]string{"broker-config/broker-plain.yaml", "broker-config/config-br-defaults-namespaces.yaml"}, map[string]want{
			"Broker default/default":                        {notReady: "the default config (ConfigMap knative-eventing/config-br-defaults): ConfigMap knative-eventing/config-kafka-channel is not in the configuration"},
			"ConfigMap knative-eventing/config-br-defaults": {},
		}},
		{[]string{"broker-config/broker-plain.yaml", "broker-config/config-br-defaults-class-namespaces.yaml"}, map[string]want{
			"Broker default/default":                        {notReady: `"KafkaBroker" is not a broker class Sluice runs`},
			"ConfigMap knative-eventing/config-br-defaults": {},
		}},
		{[]string{"channel-config"}, map[string]want{
			"ConfigMap knative-eventing/default-ch-webhook": {},
		}},
		{[]string{"kubectl-dump"}, map[string]want{
			"Broker default/default": {channel: ch("")}, // stock config-br-default-channel: --channel
		}},
		{[]string{"mt-broker"}, map[string]want{
			"Broker default/default":                             {channel: ch("memory")},
			"ConfigMap default/my-broker-specific-configuration": {},
		}},
		{[]string{"parallel-multiple-branches"}, map[string]want{
			"Parallel default/odd-even-parallel": {channel: ch("memory"), refs: map[string]string{
				"spec.branches[0].filter": tmpl + "even-filter" + svc, "spec.branches[0].subscriber": tmpl + "even-transformer" + svc,
				"spec.branches[1].filter": tmpl + "odd-filter" + svc, "spec.branches[1].subscriber": tmpl + "odd-transformer" + svc,
				"spec.reply": tmpl + "event-display" + svc}},
		}},
		{[]string{"ping-source"}, map[string]want{
			"PingSource default/test-ping-source":        {refs: map[string]string{"spec.sink": tmpl + "event-display" + svc}},
			"PingSource default/test-ping-source-binary": {refs: map[string]string{"spec.sink": tmpl + "event-display" + svc}},
		}},
		{[]string{"sequence-reply-to-event-display"}, map[string]want{
			"Sequence default/sequence": {channel: ch("memory"), refs: map[string]string{
				"spec.steps[0]": tmpl + "first" + svc, "spec.steps[2]": tmpl + "third" + svc, "spec.reply": tmpl + "event-display" + svc}},
		}},
		{[]string{"sequence-terminal"}, map[string]want{
			"Sequence default/sequence": {channel: ch("memory"), refs: map[string]string{"spec.steps[1]": tmpl + "second" + svc}},
		}},
		// The sample's README creates the default Broker with kubectl; meteatamel's
		// broker.yaml is that Broker.
		{[]string{"sequence-with-broker-trigger", "meteatamel/broker.yaml"}, map[string]want{
			"Service default/sequence-display": {skipped: true},
			"Trigger default/display-trigger":  {refs: map[string]string{"spec.subscriber": tmpl + "sequence-display" + svc}},
			"Trigger default/sequence-trigger": {refs: map[string]string{"spec.subscriber": in + "/default/sequence-kn-sequence-0"}},
			"Sequence default/sequence":        {refs: map[string]string{"spec.reply": in + "/default/default"}},
			"Broker default/default":           {},
		}},
		{[]string{"stock-config"}, map[string]want{
			"ConfigMap knative-eventing/config-br-default-channel": {},
			"ConfigMap knative-eventing/config-br-defaults":        {},
			"ConfigMap knative-eventing/kafka-channel":             {},
		}},
		// The stock defaults, given as Knative ships them, mean what they mean without them.
		{[]string{"stock-config/default-broker.yaml", "stock-config/default-broker-channel.yaml", "kubectl-dump"}, map[string]want{
			"ConfigMap knative-eventing/config-br-defaults":        {},
			"ConfigMap knative-eventing/config-br-default-channel": {},
			"Broker default/default":                               {channel: ch("memory")},
		}},
		{[]string{"subscriptions"}, map[string]want{
			// The docs' template: Knative rejects its placeholder names too.
			"Subscription default/<subscription-name>": {notReady: `metadata.name: "<subscription-name>" is not a DNS label`},
		}},
		{[]string{"mt-broker", "triggers/trigger-ksvc.yaml"}, map[string]want{
			"Broker default/default":                             {},
			"ConfigMap default/my-broker-specific-configuration": {},
			"Trigger default/my-service-trigger":                 {refs: map[string]string{"spec.subscriber": tmpl + "my-service" + svc}},
		}},
		{[]string{"mt-broker", "triggers/trigger-custom-path.yaml"}, map[string]want{
			"Broker default/default":                             {},
			"ConfigMap default/my-broker-specific-configuration": {},
			"Trigger default/my-service-trigger":                 {refs: map[string]string{"spec.subscriber": tmpl + "my-service" + svc + "/my-custom-path"}},
		}},
		{[]string{"mt-broker", "triggers/trigger-filter.yaml"}, map[string]want{
			"Broker default/default":                             {},
			"ConfigMap default/my-broker-specific-configuration": {},
			"Trigger default/my-service-trigger":                 {},
		}},
		{[]string{"mt-broker", "triggers/trigger-dependency.yaml"}, map[string]want{
			"Broker default/default":                             {},
			"ConfigMap default/my-broker-specific-configuration": {},
			// The docs indent subscriber under filter: Knative rejects it as well.
			"Trigger default/my-service-trigger": {notReady: "spec.filter.subscriber: unknown field"},
		}},
		{[]string{"tutorial", "meteatamel/broker.yaml"}, map[string]want{
			"broker default/default":                        {notReady: `kind "broker": kinds are case-sensitive; did you mean Broker?`},
			"ConfigMap knative-eventing/default-ch-webhook": {},
			"Channel default/eventinghello-ch":              {notReady: `apiVersion "messaging.knative.dev/v1alpha1" of Channel was removed from Knative and its schema differs`},
			"Subscription default/eventinghelloa-sub":       {notReady: "spec.channel: Channel default/eventinghello-ch is not ready"},
			"Subscription default/eventinghellob-sub":       {notReady: "spec.channel: Channel default/eventinghello-ch is not ready"},
			"PingSource default/eventinghello-ping-source":  {refs: map[string]string{"spec.sink": tmpl + "eventinghello" + svc}},
			"Trigger default/helloaloha":                    {refs: map[string]string{"spec.subscriber": tmpl + "eventingaloha" + svc}},
			"Trigger default/hellobonjour":                  {notReady: `apiVersion "eventing.knative.dev/v1alpha1" of Trigger was removed from Knative and its schema differs`},
			"Broker default/default":                        {},
		}},
		{[]string{"meteatamel"}, map[string]want{
			"Broker default/default":                {},
			"Trigger default/trigger1":              {refs: map[string]string{"spec.subscriber": tmpl + "service1" + svc}},
			"Trigger default/trigger-event-display": {refs: map[string]string{"spec.subscriber": tmpl + "event-display" + svc}},
			"PingSource default/source":             {notReady: `apiVersion "sources.knative.dev/v1alpha2" of PingSource was removed from Knative and its schema differs`},
		}},
		// messaging.knative.dev/v1beta1 channels and subscriptions, read as v1; a reply
		// to a channel of the configuration goes to its Sluice address.
		{[]string{"meteatamel-complexwithreply"}, map[string]want{
			"InMemoryChannel default/channel1":   {channel: ch("memory")},
			"InMemoryChannel default/channel2":   {channel: ch("memory")},
			"Subscription default/subscription1": {refs: map[string]string{"spec.subscriber": tmpl + "service1" + svc}},
			"Subscription default/subscription2": {refs: map[string]string{
				"spec.subscriber": tmpl + "service2" + svc, "spec.reply": in + "/default/channel2"}},
			"Subscription default/subscription3": {refs: map[string]string{"spec.subscriber": tmpl + "service3" + svc}},
			"PingSource default/source":          {notReady: `apiVersion "sources.knative.dev/v1alpha2" of PingSource was removed from Knative and its schema differs`},
		}},
		// eventing-natss's examples: NatsJetStreamChannels run on the jetstream channel, and a
		// PingSource's sink and a Subscription naming one reach it at its Sluice address.
		{[]string{"nats-channel"}, map[string]want{
			"NatsJetStreamChannel knative-eventing/channel-defaults": {channel: ch("jetstream")},
			"NatsJetStreamChannel default/my-default-channel":        {channel: ch("jetstream")},
			"Service default/event-display":                          {skipped: true},
			"Service default/dead-letter-display":                    {skipped: true},
			"PingSource default/ping":                                {refs: map[string]string{"spec.sink": in + "/default/my-default-channel"}},
			"Subscription default/subscription": {refs: map[string]string{"spec.subscriber": tmpl + "event-display" + svc,
				"spec.delivery.deadLetterSink": tmpl + "dead-letter-display" + svc}},
		}},
		// eventing-natss's broker docs: the NatsJetStreamBroker class runs on jetstream; its
		// config annotation's Deployment settings are refused, naming the field.
		{[]string{"nats-broker"}, map[string]want{
			"Broker default/my-broker":         {channel: ch("jetstream")},
			"Trigger default/trigger-with-dls": {refs: map[string]string{"spec.subscriber": tmpl + "my-service" + svc, "spec.delivery.deadLetterSink": tmpl + "dead-letter-service" + svc}},
		}},
		{[]string{"nats-broker-annotation"}, map[string]want{
			"Broker default/my-broker": {notReady: "metadata.annotations.natsjetstream.eventing.knative.dev/config.filter: supported by Knative, not by Sluice"},
		}},
		// A channel template of NatsJetStreamChannel: the bare one loads; the example's stream
		// retention and consumer template are refused, naming them.
		{[]string{"nats-config", "kubectl-dump"}, map[string]want{
			"ConfigMap knative-eventing/config-natjsm-channel":     {},
			"ConfigMap knative-eventing/config-br-default-channel": {},
			"Broker default/default":                               {notReady: "spec.config: ConfigMap config-br-default-channel: data.channelTemplateSpec.spec.stream.config.retention: supported by Knative, not by Sluice"},
		}},
		// The KafkaNamespaced class, its ConfigMap in its namespace: the kafka channel.
		{[]string{"kafka-namespaced"}, map[string]want{
			"Broker default/broker-isolated-data-plane": {channel: ch("kafka")},
			"ConfigMap default/kafka-broker-config":     {},
		}},
		// config-br-defaults with delivery defaults: the Broker without class or config runs
		// on the clusterDefault's kafka-channel template (its delivery: config's tests).
		{[]string{"br-defaults-delivery", "meteatamel/broker.yaml", "meteatamel/brokertrigger-trigger1.yaml", "stock-config/kafka-channel-configmap.yaml"}, map[string]want{
			"ConfigMap knative-eventing/config-br-defaults": {},
			"ConfigMap knative-eventing/kafka-channel":      {},
			"Broker default/default":                        {channel: ch("kafka")},
			"Trigger default/trigger1":                      {refs: map[string]string{"spec.subscriber": tmpl + "service1" + svc}},
		}},
		// Knative's authorization docs: EventPolicies with refs, a selector, a wildcard
		// sub and filters, and the example they protect.
		{[]string{"eventpolicy"}, map[string]want{
			"Namespace default/namespace-1":        {skipped: true},
			"Namespace default/namespace-2":        {skipped: true},
			"Broker namespace-1/broker":            {},
			"PingSource namespace-1/pingsource-1":  {refs: map[string]string{"spec.sink": in + "/namespace-1/broker"}},
			"PingSource namespace-2/pingsource-2":  {refs: map[string]string{"spec.sink": in + "/namespace-1/broker"}},
			"Service namespace-1/event-display":    {skipped: true},
			"Trigger namespace-1/trigger":          {refs: map[string]string{"spec.subscriber": "http://event-display.namespace-1.svc.cluster.local"}},
			"EventPolicy namespace-1/event-policy": {},
			"EventPolicy default/my-event-policy":  {},
		}},
		// eventing-rabbitmq's samples: a RabbitMQBroker naming a RabbitmqBrokerConfig (a
		// RabbitmqCluster's, a connectionSecret's) or a RabbitmqCluster runs on the rabbitmq
		// channel; the cluster is the one of --rabbitmq-url, the operator's objects are skipped.
		{[]string{"rabbitmq-broker"}, map[string]want{
			"RabbitmqCluster quick-setup-sample/rabbitmq":            {skipped: true},
			"RabbitmqBrokerConfig quick-setup-sample/default-config": {},
			"Broker quick-setup-sample/default": {channel: ch("rabbitmq"), note: rabbitNote, refs: map[string]string{
				"spec.delivery.deadLetterSink": tmpl + "event-display.quick-setup-sample" + svcDomain}},
			"PingSource quick-setup-sample/ping-source":   {refs: map[string]string{"spec.sink": in + "/quick-setup-sample/default"}},
			"PingSource quick-setup-sample/ping-source-2": {refs: map[string]string{"spec.sink": in + "/quick-setup-sample/default"}},
			"Trigger quick-setup-sample/failer-trigger":   {note: rabbitNote, refs: map[string]string{"spec.subscriber": tmpl + "failer.quick-setup-sample" + svcDomain}},
		}},
		{[]string{"rabbitmq-retry"}, map[string]want{
			"RabbitmqBrokerConfig retry-config-sample/default-config": {},
			"Broker retry-config-sample/default": {channel: ch("rabbitmq"), refs: map[string]string{
				"spec.delivery.deadLetterSink": tmpl + "event-display.retry-config-sample" + svcDomain}},
			"Trigger retry-config-sample/failer-trigger": {refs: map[string]string{"spec.subscriber": tmpl + "failer.retry-config-sample" + svcDomain}},
		}},
		{[]string{"rabbitmq-external"}, map[string]want{
			"RabbitmqBrokerConfig external-cluster-sample/default-config": {},
			"Broker external-cluster-sample/default": {channel: ch("rabbitmq"), refs: map[string]string{
				"spec.delivery.deadLetterSink": tmpl + "event-display.external-cluster-sample" + svcDomain}},
		}},
		{[]string{"rabbitmq-trigger-customizations"}, map[string]want{
			"RabbitmqBrokerConfig trigger-customizations-sample/default-config": {},
			"Broker trigger-customizations-sample/default":                      {channel: ch("rabbitmq")},
			"Trigger trigger-customizations-sample/fifo-trigger": {refs: map[string]string{
				"spec.subscriber": tmpl + "fifo-event-display.trigger-customizations-sample" + svcDomain}},
			"Trigger trigger-customizations-sample/high-throughput-trigger": {refs: map[string]string{
				"spec.subscriber": tmpl + "high-throughput-event-display.trigger-customizations-sample" + svcDomain}},
		}},
		// Brokers in two namespaces on one RabbitmqCluster. The sample's pong-source sits in
		// namespace ping and names a Broker ping/pong-broker-rabbitmq that is not there:
		// Knative could not resolve that sink either.
		{[]string{"rabbitmq-cluster"}, map[string]want{
			"RabbitmqCluster knative-eventing/rabbitmq":     {skipped: true},
			"Broker ping/ping-broker-rabbitmq":              {channel: ch("rabbitmq")},
			"Broker pong/pong-broker-rabbitmq":              {channel: ch("rabbitmq")},
			"PingSource ping/ping-source":                   {refs: map[string]string{"spec.sink": in + "/ping/ping-broker-rabbitmq"}},
			"PingSource ping/pong-source":                   {notReady: "spec.sink.ref: Broker ping/pong-broker-rabbitmq is not in the configuration or --refs"},
			"Service ping/ping-cloudevents-player-rabbitmq": {skipped: true},
			"Service pong/pong-cloudevents-player-rabbitmq": {skipped: true},
			"Trigger ping/ping-cloudevents-player-trigger-rabbitmq": {refs: map[string]string{
				"spec.subscriber": tmpl + "ping-cloudevents-player-rabbitmq.ping" + svcDomain}},
			"Trigger pong/pong-cloudevents-player-trigger-rabbitmq": {refs: map[string]string{
				"spec.subscriber": tmpl + "pong-cloudevents-player-rabbitmq.pong" + svcDomain}},
		}},
	}
	fileLoads := map[string]bool{} // every file of the corpus → all its objects ready (in some group)
	fileWhy := map[string]string{}
	err := filepath.WalkDir(corpusDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
			fileLoads[p] = false
			fileWhy[p] = "in no group of this test"
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		objs, _ := validate(t, g.paths...)
		seen := map[string]bool{}
		perFile := map[string][]objectStatus{}
		for _, o := range objs {
			key := o.Kind + " " + o.Namespace + "/" + o.Name
			perFile[o.File] = append(perFile[o.File], o)
			w, ok := g.want[key]
			if !ok {
				if seen[key] { // a name defined twice in a group is reported by the group's want
					continue
				}
				t.Errorf("%v: unexpected object %s (%+v)", g.paths, key, o)
				continue
			}
			seen[key] = true
			switch {
			case w.skipped:
				if !o.Skipped {
					t.Errorf("%v: %s: not skipped: %+v", g.paths, key, o)
				}
				continue
			case w.notReady != "":
				if o.Ready || !strings.Contains(o.Reason, w.notReady) {
					t.Errorf("%v: %s: ready %v, reason %q; want not ready with %q", g.paths, key, o.Ready, o.Reason, w.notReady)
				}
				continue
			case !o.Ready:
				t.Errorf("%v: %s: not ready: %s", g.paths, key, o.Reason)
				continue
			case !strings.Contains(o.Reason, w.note):
				t.Errorf("%v: %s: reason %q, want %q", g.paths, key, o.Reason, w.note)
			}
			if w.channel != nil && o.Channel != *w.channel {
				t.Errorf("%v: %s: channel %q, want %q", g.paths, key, o.Channel, *w.channel)
			}
			got := map[string]string{}
			for _, r := range o.Refs {
				got[r.Field] = r.URL
			}
			for f, u := range w.refs {
				if got[f] != u {
					t.Errorf("%v: %s: %s resolved to %q, want %q", g.paths, key, f, got[f], u)
				}
			}
		}
		for key := range g.want {
			if !seen[key] {
				t.Errorf("%v: no object %s", g.paths, key)
			}
		}
		for f, os := range perFile {
			ok, why := true, ""
			for _, o := range os {
				if !o.Ready && !o.Skipped {
					ok, why = false, o.Kind+" "+o.Name+": "+o.Reason
				}
			}
			if ok {
				fileLoads[f] = true
			} else if !fileLoads[f] {
				fileWhy[f] = why
			}
		}
	}
	var files []string
	loaded := 0
	for f, ok := range fileLoads {
		files = append(files, f)
		if ok {
			loaded++
		}
	}
	sort.Strings(files)
	t.Logf("Knative corpus: %d of %d manifests load", loaded, len(files))
	for _, f := range files {
		if !fileLoads[f] {
			t.Logf("  does not load: %s: %s", strings.TrimPrefix(f, corpusDir+"/"), fileWhy[f])
		}
	}
	if len(files) < 30 {
		t.Errorf("the corpus holds %d manifests, want at least 30", len(files))
	}
	for f, why := range fileWhy {
		if why == "in no group of this test" && !fileLoads[f] {
			t.Errorf("%s is in no group of this test", f)
		}
	}
}
