package kube

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/internal/kubetest"
)

// testRefs returns refs against the test API server whose discovery fails the first
// failFirst calls (an API server that did not answer), and a channel of its signals.
func testRefs(t *testing.T, failFirst int32) (*refs, chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := kubernetes.NewForConfigOrDie(srv.Config).Discovery()
	var calls atomic.Int32
	disc := func(gv string) ([]string, []string, error) {
		if calls.Add(1) <= failFirst {
			return nil, nil, errors.New("the API server did not answer")
		}
		list, err := d.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return nil, nil, err
		}
		var names, kinds []string
		for _, ar := range list.APIResources {
			names, kinds = append(names, ar.Name), append(kinds, ar.Kind)
		}
		return names, kinds, nil
	}
	signals := make(chan struct{}, 1)
	r := newRefs(ctx, srv.Dynamic(), disc, map[string]cache.Store{}, func() {
		select {
		case signals <- struct{}{}:
		default:
		}
	})
	t.Cleanup(func() { cancel(); r.stop() })
	return r, signals
}

func (r *refs) kindCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.kinds)
}

// TestRefsOnlyAddressable: a ref to a kind with no address (a ConfigMap, a Secret, a
// Deployment) is refused naming the ref, and starts no informer caching its kind.
func TestRefsOnlyAddressable(t *testing.T) {
	kubetest.Need(t, srv)
	for _, c := range []struct{ apiVersion, kind string }{
		{"v1", "ConfigMap"},
		{"v1", "Secret"},
		{"apps/v1", "Deployment"},
		{"rbac.authorization.k8s.io/v1", "Role"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			r, _ := testRefs(t, 0)
			r.begin()
			_, ok, err := r.resolve(c.apiVersion, c.kind, "ns", "x")
			if ok || err == nil || !strings.Contains(err.Error(), c.kind+" ns/x: not an Addressable kind") {
				t.Errorf("resolve %s %s: ok=%v err=%v; want refused naming the ref", c.apiVersion, c.kind, ok, err)
			}
			if n := r.kindCount(); n != 0 {
				t.Errorf("%d informers started; want 0", n)
			}
		})
	}
}

// TestRefsStopUnusedInformers: the informer of a kind no ref of the last load names is
// stopped (it no longer caches the kind, nor retries a kind it may not read).
func TestRefsStopUnusedInformers(t *testing.T) {
	kubetest.Need(t, srv)
	r, _ := testRefs(t, 0)
	r.begin()
	if _, _, err := r.resolve("v1", "Service", "ns", "x"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("resolve: %v; want Service ns/x does not exist", err)
	}
	r.end()
	if n := r.kindCount(); n != 1 {
		t.Fatalf("%d informers after a load naming a Service; want 1", n)
	}
	r.begin() // a load with no refs
	r.end()
	if n := r.kindCount(); n != 0 {
		t.Fatalf("%d informers after a load naming none; want 0", n)
	}
}

// TestRefsRetryDiscovery: a ref left unresolved by a failed discovery is asked again:
// the refs signal a new load, and report a change once the server answers.
func TestRefsRetryDiscovery(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "refs-retry"
	namespace(t, ns)
	core := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Services(ns)
	if _, err := core.Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "display"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, signals := testRefs(t, 1)
	r.retryIn = 100 * time.Millisecond
	r.begin()
	if _, _, err := r.resolve("v1", "Service", ns, "display"); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("resolve: %v; want the discovery error", err)
	}
	r.end()
	select {
	case <-signals:
	case <-time.After(hang):
		t.Fatalf("no new load signalled within %v of a failed discovery", hang)
	}
	if !r.changed() {
		t.Fatal("changed() = false once the server answers; want true")
	}
	r.begin()
	url, ok, err := r.resolve("v1", "Service", ns, "display")
	if !ok || err != nil || url != "http://display.refs-retry.svc.cluster.local" {
		t.Fatalf("resolve again: %q %v %v", url, ok, err)
	}
}

// TestRefsNotAddressableInCluster: a Trigger whose subscriber ref names a ConfigMap is
// not ready, naming the ref.
func TestRefsNotAddressableInCluster(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "refs-cm"
	namespace(t, ns)
	watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: refs-cm, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: to-cm, namespace: refs-cm},
  spec: {broker: b, subscriber: {ref: {apiVersion: v1, kind: ConfigMap, name: settings}}}}`)
	waitFor(t, triggers, ns, "to-cm", "not ready naming the ref", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "False" &&
			strings.Contains(c["message"].(string), "v1 ConfigMap refs-cm/settings: not an Addressable kind")
	})
}

// TestRefsRetryNotServed: a ref to a kind the server does not serve yet (Knative
// Serving installed after Sluice) resolves once its CRD is installed, with no other
// change.
func TestRefsRetryNotServed(t *testing.T) {
	kubetest.Need(t, srv)
	r, signals := testRefs(t, 0)
	r.retryIn = 100 * time.Millisecond
	r.begin()
	if _, ok, err := r.resolve("widgets.example.dev/v1", "Widget", "ns", "w"); ok || err != nil {
		t.Fatalf("resolve of a kind not served: ok=%v err=%v; want not resolved, no error", ok, err)
	}
	r.end()
	select { // a retry while the kind is still not served: it asks again later
	case <-signals:
	case <-time.After(hang):
		t.Fatalf("no new load signalled within %v", hang)
	}
	if r.changed() {
		t.Fatal("changed() = true before the kind is served")
	}
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(`{apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition,
  metadata: {name: widgets.widgets.example.dev},
  spec: {group: widgets.example.dev, scope: Namespaced, names: {plural: widgets, singular: widget, kind: Widget},
    versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]}}`), &crd.Object); err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := srv.Dynamic().Resource(crds).Create(context.Background(), &crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(hang)
	for !r.changed() {
		if time.Now().After(deadline) {
			t.Fatalf("changed() still false %v after the kind's CRD was installed", hang)
		}
		select {
		case <-signals:
		case <-time.After(hang):
			t.Fatalf("no new load signalled within %v", hang)
		}
	}
	r.begin()
	if _, _, err := r.resolve("widgets.example.dev/v1", "Widget", "ns", "w"); err == nil || !strings.Contains(err.Error(), "Widget.widgets.example.dev ns/w does not exist") {
		t.Fatalf("resolve once served: %v; want does not exist", err)
	}
}
