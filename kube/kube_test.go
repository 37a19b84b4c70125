package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/kubetest"
)

// srv is the API server of this package's tests, started by TestMain.
var srv *kubetest.Server

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m, &srv)) }

// hang bounds every wait of these tests: a bound on a hang, not a measure.
const hang = 60 * time.Second

var (
	brokers  = schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "brokers"}
	triggers = schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "triggers"}
)

// apply creates or updates the object of yamlText.
func apply(t *testing.T, gvr schema.GroupVersionResource, yamlText string) {
	t.Helper()
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(yamlText), &u.Object); err != nil {
		t.Fatal(err)
	}
	c := srv.Dynamic().Resource(gvr).Namespace(u.GetNamespace())
	cur, err := c.Get(context.Background(), u.GetName(), metav1.GetOptions{})
	if err == nil {
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = c.Update(context.Background(), &u, metav1.UpdateOptions{})
	} else {
		_, err = c.Create(context.Background(), &u, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("applying %s %s: %v", gvr.Resource, u.GetName(), err)
	}
}

// readyCondition returns the Ready condition of the object's status, or nil.
func readyCondition(u *unstructured.Unstructured) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m
		}
	}
	return nil
}

// waitFor polls the object until ok holds, and fails t after hang.
func waitFor(t *testing.T, gvr schema.GroupVersionResource, ns, name string, what string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	deadline := time.Now().Add(hang)
	var last *unstructured.Unstructured
	for time.Now().Before(deadline) {
		u, err := srv.Dynamic().Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = u
			if ok(u) {
				return u
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s %s/%s: not %s within %v; last: %v", gvr.Resource, ns, name, what, hang, last)
	return nil
}

// namespace creates namespace ns.
func namespace(t *testing.T, ns string) {
	t.Helper()
	_, err := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// running is a Watch in the background and the configurations it applied.
type running struct {
	mu   sync.Mutex
	cfg  *config.Config
	n    int
	stop context.CancelFunc
	done chan error
}

func (r *running) last() (*config.Config, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg, r.n
}

// watch runs Watch until the test ends; its status is the configuration's own.
func watch(t *testing.T, opts Options) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: cancel, done: make(chan error, 1)}
	opts.Config = append(opts.Config, config.WithIngressURL("http://127.0.0.1:8080"))
	opts.Status = func() []config.ObjectStatus {
		c, _ := r.last()
		if c == nil {
			return nil
		}
		return c.Objects
	}
	opts.Settle = 10 * time.Millisecond
	opts.StatusInterval = 200 * time.Millisecond
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	go func() {
		r.done <- Watch(ctx, srv.Config, func(c *config.Config) {
			r.mu.Lock()
			r.cfg, r.n = c, r.n+1
			r.mu.Unlock()
		}, func(err error) { t.Errorf("onError: %v", err) }, opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		case <-time.After(hang):
			t.Errorf("Watch did not return within %v of its context's end", hang)
		}
	})
	return r
}

func TestStatusWrittenBack(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "status"
	namespace(t, ns)
	watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: status, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: status}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/sink"}}}`)
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: rabbit, namespace: status, annotations: {eventing.knative.dev/broker.class: RabbitMQBroker}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: rt, namespace: status}, spec: {broker: rabbit, subscriber: {uri: "http://127.0.0.1:9/r"}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: orphan, namespace: status}, spec: {broker: nobroker, subscriber: {uri: "http://127.0.0.1:9/o"}}}`)

	b := waitFor(t, brokers, ns, "b", "ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	})
	if url, _, _ := unstructured.NestedString(b.Object, "status", "address", "url"); url != "http://127.0.0.1:8080/status/b" {
		t.Errorf("broker status.address.url %q", url)
	}
	if addrs, _, _ := unstructured.NestedSlice(b.Object, "status", "addresses"); len(addrs) != 1 {
		t.Errorf("broker status.addresses %v", addrs)
	}
	if g, _, _ := unstructured.NestedInt64(b.Object, "status", "observedGeneration"); g != b.GetGeneration() {
		t.Errorf("broker observedGeneration %d, generation %d", g, b.GetGeneration())
	}
	tr := waitFor(t, triggers, ns, "t", "ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	})
	if uri, _, _ := unstructured.NestedString(tr.Object, "status", "subscriberUri"); uri != "http://127.0.0.1:9/sink" {
		t.Errorf("trigger status.subscriberUri %q", uri)
	}
	orphan := waitFor(t, triggers, ns, "orphan", "not ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "False"
	})
	if c := readyCondition(orphan); c["reason"] != ReasonInvalid || !strings.Contains(fmt.Sprint(c["message"]), "nobroker") {
		t.Errorf("orphan trigger's Ready condition %v", c)
	}

	// An invalid edit: not ready, naming the field; the last good version keeps running.
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: status}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/sink"}, filter: {attributes: {"Bad Name": x}}}}`)
	bad := waitFor(t, triggers, ns, "t", "not ready after an invalid edit", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return c != nil && c["status"] == "False" && g == u.GetGeneration()
	})
	if c := readyCondition(bad); c["reason"] != ReasonInvalid || !strings.Contains(fmt.Sprint(c["message"]), "spec.filter.attributes") {
		t.Errorf("invalid trigger's Ready condition %v", c)
	}
	// And back.
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: status}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/sink2"}}}`)
	waitFor(t, triggers, ns, "t", "ready again", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		uri, _, _ := unstructured.NestedString(u.Object, "status", "subscriberUri")
		return c != nil && c["status"] == "True" && uri == "http://127.0.0.1:9/sink2"
	})

	// Another class's Broker and its Trigger are not Sluice's: no status written.
	for _, x := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{brokers, "rabbit"}, {triggers, "rt"}} {
		u, err := srv.Dynamic().Resource(x.gvr).Namespace(ns).Get(context.Background(), x.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, has := u.Object["status"]; has {
			t.Errorf("%s %s: status written: %v", x.gvr.Resource, x.name, u.Object["status"])
		}
	}
}

func TestOtherClassesByOption(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "classes"
	namespace(t, ns)
	r := watch(t, Options{Classes: []string{config.ClassSluice, "MTChannelBasedBroker"}, Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: mt, namespace: classes, annotations: {eventing.knative.dev/broker.class: MTChannelBasedBroker}}}`)
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: unannotated, namespace: classes}}`)
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: kafka, namespace: classes, annotations: {eventing.knative.dev/broker.class: Kafka}}}`)
	for _, name := range []string{"mt", "unannotated"} {
		waitFor(t, brokers, ns, name, "ready", func(u *unstructured.Unstructured) bool {
			c := readyCondition(u)
			return c != nil && c["status"] == "True"
		})
	}
	cfg, _ := r.last()
	for _, o := range cfg.Objects {
		if o.Key() == "Broker classes/kafka" {
			t.Errorf("a Kafka broker was read though the class is not run: %+v", o)
		}
	}
}

func TestLeaderElection(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "leader"
	namespace(t, ns)
	e := Election{Namespace: ns, Name: "lease", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	ea, eb := e, e
	ea.Identity, eb.Identity = "a", "b"
	a := watch(t, Options{Election: ea})
	holder := func() string {
		l, err := kubernetes.NewForConfigOrDie(srv.Config).CoordinationV1().Leases(ns).Get(context.Background(), "lease", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	waitLeader := func(want string) {
		t.Helper()
		deadline := time.Now().Add(hang)
		for holder() != want {
			if time.Now().After(deadline) {
				t.Fatalf("lease holder %q, want %q within %v", holder(), want, hang)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitLeader("a")
	watch(t, Options{Election: eb})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: leader, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	waitFor(t, brokers, ns, "b", "ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	})
	if h := holder(); h != "a" {
		t.Fatalf("holder %q, want a still", h)
	}
	a.stop() // the leader goes: b takes over and writes the status of what changes next
	waitLeader("b")
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: leader}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/x"}}}`)
	waitFor(t, triggers, ns, "t", "ready (written by b)", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	})
}

func TestChannelAndSubscriptionStatus(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "channels"
	namespace(t, ns)
	imc := schema.GroupVersionResource{Group: "messaging.knative.dev", Version: "v1", Resource: "inmemorychannels"}
	subs := schema.GroupVersionResource{Group: "messaging.knative.dev", Version: "v1", Resource: "subscriptions"}
	watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, imc, `{apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, metadata: {name: ch, namespace: channels}}`)
	apply(t, subs, `{apiVersion: messaging.knative.dev/v1, kind: Subscription, metadata: {name: s, namespace: channels},
  spec: {channel: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel, name: ch}, subscriber: {uri: "http://127.0.0.1:9/s"}}}`)
	ch := waitFor(t, imc, ns, "ch", "ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	})
	if url, _, _ := unstructured.NestedString(ch.Object, "status", "address", "url"); url != "http://127.0.0.1:8080/channels/ch" {
		t.Errorf("channel status.address.url %q", url)
	}
	waitFor(t, subs, ns, "s", "ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	})
}

// TestRefsFromCluster: a ref to a core Service resolves to its cluster DNS name (and
// port) once the Service exists; a ref to another class's Broker to its
// status.address.url once it has one; until then the referring Trigger is not ready,
// saying why, and it follows the target's changes and deletion.
func TestRefsFromCluster(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "refs"
	namespace(t, ns)
	watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: refs, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: rabbit, namespace: refs, annotations: {eventing.knative.dev/broker.class: RabbitMQBroker}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: to-svc, namespace: refs},
  spec: {broker: b, subscriber: {ref: {apiVersion: v1, kind: Service, name: display}, uri: /hook}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: to-rabbit, namespace: refs},
  spec: {broker: b, subscriber: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: rabbit}}}}`)

	notReady := func(name, reason string) {
		t.Helper()
		waitFor(t, triggers, ns, name, "not ready: "+reason, func(u *unstructured.Unstructured) bool {
			c := readyCondition(u)
			return c != nil && c["status"] == "False" && strings.Contains(fmt.Sprint(c["message"]), reason)
		})
	}
	readyAt := func(name, url string) {
		t.Helper()
		waitFor(t, triggers, ns, name, "ready at "+url, func(u *unstructured.Unstructured) bool {
			c := readyCondition(u)
			uri, _, _ := unstructured.NestedString(u.Object, "status", "subscriberUri")
			return c != nil && c["status"] == "True" && uri == url
		})
	}
	notReady("to-svc", "spec.subscriber.ref: Service refs/display does not exist")
	notReady("to-rabbit", "Broker.eventing.knative.dev refs/rabbit has no status.address.url")

	core := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Services(ns)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "display"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8081}}}}
	if _, err := core.Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	readyAt("to-svc", "http://display.refs.svc.cluster.local:8081/hook")

	// The other class's controller writes its Broker's address: the Trigger follows it.
	rabbit, err := srv.Dynamic().Resource(brokers).Namespace(ns).Get(context.Background(), "rabbit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setAddress := func(url string) {
		t.Helper()
		if err := unstructured.SetNestedField(rabbit.Object, url, "status", "address", "url"); err != nil {
			t.Fatal(err)
		}
		if rabbit, err = srv.Dynamic().Resource(brokers).Namespace(ns).UpdateStatus(context.Background(), rabbit, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setAddress("http://rabbit-ingress.refs.svc.cluster.local/refs/rabbit")
	readyAt("to-rabbit", "http://rabbit-ingress.refs.svc.cluster.local/refs/rabbit")
	setAddress("http://rabbit-ingress2.refs.svc.cluster.local/refs/rabbit")
	readyAt("to-rabbit", "http://rabbit-ingress2.refs.svc.cluster.local/refs/rabbit")

	if err := core.Delete(context.Background(), "display", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	notReady("to-svc", "Service refs/display does not exist")
}

// TestDefaultClassFromConfigMap: a Broker with no class annotation is of the class
// knative-eventing/config-br-defaults gives its namespace, as in the file mode; with no
// such ConfigMap, of MTChannelBasedBroker (not run by default).
func TestDefaultClassFromConfigMap(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "defaults"
	namespace(t, ns)
	kc := kubernetes.NewForConfigOrDie(srv.Config)
	if _, err := kc.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "knative-eventing"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	r := watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: plain, namespace: defaults}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: defaults}, spec: {broker: plain, subscriber: {uri: "http://127.0.0.1:9/x"}}}`)
	deadline := time.Now().Add(hang)
	for n := 0; n == 0; _, n = r.last() {
		if time.Now().After(deadline) {
			t.Fatalf("no configuration applied within %v", hang)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cfg, _ := r.last()
	for _, b := range cfg.Brokers {
		if b.Namespace == ns {
			t.Fatalf("a Broker of the stock default class runs: %+v", b)
		}
	}

	cms := kc.CoreV1().ConfigMaps("knative-eventing")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "config-br-defaults"},
		Data: map[string]string{"default-br-config": "clusterDefault: {brokerClass: MTChannelBasedBroker}\nnamespaceDefaults:\n  defaults: {brokerClass: Sluice}\n"}}
	if _, err := cms.Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cms.Delete(context.Background(), "config-br-defaults", metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})
	for _, x := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{brokers, "plain"}, {triggers, "t"}} {
		waitFor(t, x.gvr, ns, x.name, "ready, of the default class Sluice", func(u *unstructured.Unstructured) bool {
			c := readyCondition(u)
			return c != nil && c["status"] == "True"
		})
	}
}

// TestReadinessEvents: the status writer records a Kubernetes Event on an object when it
// becomes ready (Normal, Ready) and when it becomes not ready (Warning, with the
// condition's reason and message), once per change.
func TestReadinessEvents(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "events"
	namespace(t, ns)
	watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: events, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: events}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/x"}}}`)
	events := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Events(ns)
	// count sums the counts of the Events of type and reason on object name.
	count := func(name, typ, reason, msg string) int32 {
		list, err := events.List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		var n int32
		for _, e := range list.Items {
			if e.Type == typ && e.Reason == reason && strings.Contains(e.Message, msg) && e.Source.Component == EventComponent {
				n += max(e.Count, 1)
			}
		}
		return n
	}
	waitCount := func(name, typ, reason, msg string, want int32) {
		t.Helper()
		deadline := time.Now().Add(hang)
		for count(name, typ, reason, msg) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d %s events %q (%q), want %d within %v", name, count(name, typ, reason, msg), typ, reason, msg, want, hang)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitCount("b", corev1.EventTypeNormal, EventReasonReady, "ready", 1)
	waitCount("t", corev1.EventTypeNormal, EventReasonReady, "ready", 1)

	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: events}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/x"}, filter: {attributes: {"Bad Name": x}}}}`)
	waitCount("t", corev1.EventTypeWarning, ReasonInvalid, "spec.filter.attributes", 1)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: events}, spec: {broker: b, subscriber: {uri: "http://127.0.0.1:9/y"}}}`)
	waitCount("t", corev1.EventTypeNormal, EventReasonReady, "ready", 2)
	// Status rewritten every interval records nothing more: one Event per change.
	time.Sleep(time.Second)
	for _, c := range []struct {
		name, typ, reason string
		want              int32
	}{{"b", corev1.EventTypeNormal, EventReasonReady, 1}, {"t", corev1.EventTypeNormal, EventReasonReady, 2}, {"t", corev1.EventTypeWarning, ReasonInvalid, 1}} {
		if n := count(c.name, c.typ, c.reason, ""); n != c.want {
			t.Errorf("%s: %d %s %s events, want %d", c.name, n, c.typ, c.reason, c.want)
		}
	}
}

// TestRefsReadBeforeFirstLoad: a Trigger whose subscriber is a ref to a Service that
// exists when Sluice starts is ready in the first configuration applied: the first load
// waits for the Service informer it starts, so no event accepted at startup misses it.
func TestRefsReadBeforeFirstLoad(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "refs-first"
	namespace(t, ns)
	core := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Services(ns)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "display"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := core.Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: refs-first, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: to-svc, namespace: refs-first},
  spec: {broker: b, subscriber: {ref: {apiVersion: v1, kind: Service, name: display}}}}`)

	r := watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	deadline := time.Now().Add(hang)
	for {
		cfg, n := r.last()
		if n > 0 {
			for _, o := range cfg.Objects {
				if o.Kind == "Trigger" && o.Namespace == ns && o.Name == "to-svc" {
					if !o.Ready {
						t.Fatalf("first configuration applied: Trigger to-svc not ready: %s", o.Reason)
					}
					return
				}
			}
			t.Fatalf("first configuration applied has no Trigger %s/to-svc", ns)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no configuration applied within %v", hang)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
