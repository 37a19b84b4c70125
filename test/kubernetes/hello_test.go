package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/internal/kubetest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// helloWorld returns the objects of Knative's hello-world sample as docs/kubernetes.md
// gives it (the text between `kubectl apply -n hello -f - <<'EOF'` and `EOF`).
func helloWorld(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(b, []byte("kubectl apply -n hello -f - <<'EOF'\n"))
	sample, _, ok2 := bytes.Cut(rest, []byte("\nEOF\n"))
	if !ok || !ok2 {
		t.Fatal("docs/kubernetes.md: no hello-world sample (kubectl apply -n hello -f - <<'EOF' … EOF)")
	}
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(sample, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
			t.Fatalf("docs/kubernetes.md: the sample: %v", err)
		}
		out = append(out, u)
	}
	return out
}

// applyAll creates objs in namespace ns, as `kubectl apply -n NS -f` does, skipping those
// of kind skip.
func applyAll(t *testing.T, ns string, objs []*unstructured.Unstructured, skip string) {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(srv.Config)))
	for _, o := range objs {
		if o.GetKind() == skip {
			continue
		}
		u := o.DeepCopy()
		u.SetNamespace(ns)
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if _, err := srv.Dynamic().Resource(m.Resource).Namespace(ns).Create(context.Background(), u,
			metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("creating %s %s/%s: %v", u.GetKind(), ns, u.GetName(), err)
		}
	}
}

// readyCondition returns the Ready condition of u's status, or nil.
func readyCondition(u *unstructured.Unstructured) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m
		}
	}
	return nil
}

// TestHelloWorldSample applies Knative's hello-world sample, as docs/kubernetes.md shows
// it, to a Sluice run as the deploy manifests' ServiceAccount: events sent to the
// Broker's status address reach the sample's Trigger's subscriber (its Service mapped to
// a receiver on 127.0.0.1 by --refs, the cluster DNS name being unreachable here); the
// Broker gets a Kubernetes Event. Applied again in a second namespace without its
// Service, the Trigger is not ready, naming the missing Service, until the Service is
// applied; then it resolves to the Service's cluster DNS name.
func TestHelloWorldSample(t *testing.T) {
	kubetest.Need(t, srv)
	rcv := newReceiver(t)
	refs := filepath.Join(t.TempDir(), "refs.yaml")
	if err := os.WriteFile(refs, []byte(`- {apiVersion: v1, kind: Service, namespace: hello-world, name: event-display, url: "`+rcv.URL+`/display"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, sa := serveDeployed(t, "--refs", refs)
	sample := helloWorld(t)

	const ns = "hello-world"
	namespace(t, ns)
	applyAll(t, ns, sample, "")
	b := waitFor(t, brokers, ns, "default", "ready", ready)
	addr, _, _ := unstructured.NestedString(b.Object, "status", "address", "url")
	if want := s.Base + "/" + ns + "/default"; addr != want {
		t.Fatalf("Broker status.address.url %q, want %q", addr, want)
	}
	tr := waitFor(t, triggers, ns, "hello-display", "ready", ready)
	if uri, _, _ := unstructured.NestedString(tr.Object, "status", "subscriberUri"); uri != rcv.URL+"/display" {
		t.Errorf("Trigger status.subscriberUri %q, want %q", uri, rcv.URL+"/display")
	}
	const n = 10
	send(t, addr, "not.greeting", "other", 3) // the sample's filter drops these
	send(t, addr, "greeting", "hi", n)
	sluicetest.Eventually(t, hang, fmt.Sprintf("%d greetings at the sample's subscriber", n), func() bool { return rcv.count("/display") == n })

	// Recorded as the ServiceAccount: rbac.yaml lets it create Events.
	events := kubernetes.NewForConfigOrDie(srv.Config).CoreV1().Events(ns)
	sluicetest.Eventually(t, hang, "a Ready Event on the Broker, recorded as "+sa, func() bool {
		list, err := events.List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=default"})
		if err != nil {
			return false
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeNormal && e.Reason == "Ready" && e.Source.Component == "sluice" {
				return true
			}
		}
		return false
	})

	// No refs entry here: the Service resolves from the cluster, once it exists.
	const dns = "hello-dns"
	namespace(t, dns)
	applyAll(t, dns, sample, "Service")
	waitFor(t, triggers, dns, "hello-display", "not ready, naming the missing Service", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "False" && strings.Contains(fmt.Sprint(c["message"]), "Service "+dns+"/event-display does not exist")
	})
	var svc []*unstructured.Unstructured
	for _, o := range sample {
		if o.GetKind() == "Service" {
			svc = append(svc, o)
		}
	}
	applyAll(t, dns, svc, "")
	waitFor(t, triggers, dns, "hello-display", "ready at the Service's cluster DNS name", func(u *unstructured.Unstructured) bool {
		uri, _, _ := unstructured.NestedString(u.Object, "status", "subscriberUri")
		return ready(u) && uri == "http://event-display."+dns+".svc.cluster.local"
	})
}
