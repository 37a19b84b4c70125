// Package kubernetes tests `sluice serve --kubernetes` end to end: the real binary
// against a real Kubernetes API server in process (internal/kubetest: kube-apiserver
// with an embedded etcd and Knative's CRDs), objects applied with client-go, events sent
// to the address the Broker's status gives. It is a package of its own, not test/e2e,
// so that test/e2e's binary does not link the API server.
package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/internal/kubetest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

var (
	// sluiceBin is the binary under test, built by TestMain.
	sluiceBin string
	// srv is the API server, started by TestMain.
	srv *kubetest.Server
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-kubernetes")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "../../cmd/sluice")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sluice:", err)
		os.Exit(1)
	}
	code := kubetest.Main(m, &srv)
	os.RemoveAll(dir)
	os.Exit(code)
}

// hang bounds every wait: a bound on a hang, not a measure.
const hang = 60 * time.Second

var (
	brokers  = schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "brokers"}
	triggers = schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "triggers"}
)

// serve runs `sluice serve --kubernetes` against srv with args; it is stopped with
// SIGTERM when the test ends.
func serve(t *testing.T, args ...string) *sluicetest.Serve {
	t.Helper()
	s := sluicetest.Start(t, sluiceBin, hang, append([]string{"--kubernetes", "--kubeconfig", srv.Kubeconfig,
		"--kubernetes-status-interval", "200ms"}, args...)...)
	stopAtEnd(t, s)
	return s
}

// stopAtEnd stops s with SIGTERM when the test ends, and logs its log if the test failed.
func stopAtEnd(t *testing.T, s *sluicetest.Serve) {
	t.Cleanup(func() {
		if s.Cmd.ProcessState == nil {
			s.Cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.Exited:
			case <-time.After(30 * time.Second):
				s.Cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("sluice logs:\n%s", s.Logs)
		}
	})
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

// apply creates or updates the object of yamlText, as `kubectl apply` would.
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

// ready reports whether u's Ready condition is True, for the generation it has.
func ready(u *unstructured.Unstructured) bool {
	g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m["status"] == "True" && g == u.GetGeneration()
		}
	}
	return false
}

// waitFor polls the object until ok holds, and fails t after hang.
func waitFor(t *testing.T, gvr schema.GroupVersionResource, ns, name, what string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var last *unstructured.Unstructured
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		u, err := srv.Dynamic().Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			if last = u; ok(u) {
				return u
			}
		}
	}
	t.Fatalf("%s %s/%s: not %s within %v; last: %v", gvr.Resource, ns, name, what, hang, last)
	return nil
}

// receiver is a subscriber on 127.0.0.1 that records the ce-id of each event by path.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	ids map[string]map[string]bool // path → ids
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{ids: map[string]map[string]bool{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		if r.ids[req.URL.Path] == nil {
			r.ids[req.URL.Path] = map[string]bool{}
		}
		r.ids[req.URL.Path][req.Header.Get("ce-id")] = true
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids[path])
}

// send posts n events of type typ to url, with ids prefix-0…, and fails t unless each
// is accepted.
func send(t *testing.T, url, typ, prefix string, n int) {
	t.Helper()
	for i := range n {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"n":1}`))
		req.Header.Set("ce-specversion", "1.0")
		req.Header.Set("ce-id", fmt.Sprintf("%s-%d", prefix, i))
		req.Header.Set("ce-source", "/test")
		req.Header.Set("ce-type", typ)
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("event %d to %s: status %d", i, url, resp.StatusCode)
		}
	}
}

func TestBrokerTriggerFromTheAPI(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "shop"
	namespace(t, ns)
	rcv := newReceiver(t)
	s := serve(t, "--leader-election-namespace", ns)
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: default, namespace: shop, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: orders, namespace: shop},
  spec: {broker: default, filter: {attributes: {type: order.created}}, subscriber: {uri: "`+rcv.URL+`/orders"}}}`)

	b := waitFor(t, brokers, ns, "default", "ready", ready)
	addr, _, _ := unstructured.NestedString(b.Object, "status", "address", "url")
	if want := s.Base + "/shop/default"; addr != want {
		t.Fatalf("Broker status.address.url %q, want %q", addr, want)
	}
	tr := waitFor(t, triggers, ns, "orders", "ready", ready)
	if uri, _, _ := unstructured.NestedString(tr.Object, "status", "subscriberUri"); uri != rcv.URL+"/orders" {
		t.Errorf("Trigger status.subscriberUri %q", uri)
	}

	const n = 20
	send(t, addr, "order.created", "a", n)
	send(t, addr, "order.ignored", "x", 5) // the filter drops these
	sluicetest.Eventually(t, hang, "every order delivered", func() bool { return rcv.count("/orders") == n })

	// A Trigger added live gets its events; removed, it gets no more.
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: all, namespace: shop},
  spec: {broker: default, subscriber: {uri: "`+rcv.URL+`/all"}}}`)
	waitFor(t, triggers, ns, "all", "ready", ready)
	send(t, addr, "order.created", "b", n)
	sluicetest.Eventually(t, hang, "the new trigger's events delivered", func() bool {
		return rcv.count("/all") == n && rcv.count("/orders") == 2*n
	})
	if err := srv.Dynamic().Resource(triggers).Namespace(ns).Delete(context.Background(), "all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sluicetest.Eventually(t, hang, "the removed trigger gone from GET /status", func() bool {
		resp, err := http.Get(s.Base + "/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), "orders") && !strings.Contains(string(body), `"name":"all"`)
	})
	send(t, addr, "order.created", "c", n)
	sluicetest.Eventually(t, hang, "the remaining trigger's events delivered", func() bool { return rcv.count("/orders") == 3*n })
	if got := rcv.count("/all"); got != n {
		t.Errorf("the removed trigger got %d events, want %d (none after its removal)", got, n)
	}
}

// TestLeaderKilled runs two replicas; the status writer is killed (SIGKILL: its Lease is
// not given up) and the other takes over: a Trigger applied after gets its status, and
// events flow through the survivor.
func TestLeaderKilled(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "failover"
	namespace(t, ns)
	rcv := newReceiver(t)
	args := []string{"--leader-election-namespace", ns, "--leader-election-lease-duration", "3s",
		"--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "250ms",
		"--kubernetes-address-url", "http://sluice.failover.svc.cluster.local"}
	a, b := serve(t, args...), serve(t, args...)
	holder := func() string {
		l, err := kubernetes.NewForConfigOrDie(srv.Config).CoordinationV1().Leases(ns).Get(context.Background(), "sluice-status-writer", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	pidOf := func(h string) int {
		var pid int
		if i := strings.LastIndex(h, "_"); i >= 0 {
			fmt.Sscan(h[i+1:], &pid)
		}
		return pid
	}
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: b, namespace: failover, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	br := waitFor(t, brokers, ns, "b", "ready", ready)
	if u, _, _ := unstructured.NestedString(br.Object, "status", "address", "url"); u != "http://sluice.failover.svc.cluster.local/failover/b" {
		t.Errorf("status.address.url %q", u)
	}
	leader, survivor := a, b
	switch pidOf(holder()) {
	case a.Cmd.Process.Pid:
	case b.Cmd.Process.Pid:
		leader, survivor = b, a
	default:
		t.Fatalf("lease holder %q is neither replica (pids %d, %d)", holder(), a.Cmd.Process.Pid, b.Cmd.Process.Pid)
	}
	if err := leader.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-leader.Exited
	sluicetest.Eventually(t, hang, "the survivor holding the lease", func() bool { return pidOf(holder()) == survivor.Cmd.Process.Pid })
	apply(t, triggers, `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: t, namespace: failover},
  spec: {broker: b, subscriber: {uri: "`+rcv.URL+`/after"}}}`)
	waitFor(t, triggers, ns, "t", "ready (written by the survivor)", ready)
	send(t, survivor.Base+"/failover/b", "x", "f", 10)
	sluicetest.Eventually(t, hang, "events through the survivor", func() bool { return rcv.count("/after") == 10 })
}

// readyz returns the status code of GET /readyz.
func readyz(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestNotReadyUntilSynced: a replica that cannot read the objects (its identity has no
// rights) serves, but is not ready — it must not take events for Brokers it does not
// know — while one that has read them is.
func TestNotReadyUntilSynced(t *testing.T) {
	kubetest.Need(t, srv)
	kc, err := srv.KubeconfigAs("system:serviceaccount:nobody:nobody")
	if err != nil {
		t.Fatal(err)
	}
	blind := sluicetest.Start(t, sluiceBin, hang, "--kubernetes", "--kubeconfig", kc)
	stopAtEnd(t, blind)
	for range 5 {
		if code := readyz(t, blind.Base); code != http.StatusServiceUnavailable {
			t.Fatalf("GET /readyz of a replica that read no object: %d, want 503", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := serve(t)
	if err := sluicetest.WaitReady(s.Base, hang); err != nil {
		t.Fatal(err)
	}
}
