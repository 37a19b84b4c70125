package kubernetes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/internal/kubetest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

const deployDir = "../../deploy/kubernetes/knative"

// manifests returns the objects of the kustomization's resources, in its order.
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, r))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(b, []byte("\n---\n")) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

// resourceOf maps the kinds of the manifests to their resources.
func resourceOf(t *testing.T, u *unstructured.Unstructured) schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(u.GetAPIVersion())
	res := map[string]string{"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
		"ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings",
		"Deployment": "deployments", "Service": "services"}[u.GetKind()]
	if res == "" {
		t.Fatalf("%s %s: a kind this test does not know", u.GetKind(), u.GetName())
	}
	return gv.WithResource(res)
}

// TestDeployManifests creates deploy/kubernetes/knative/ on the API server with strict
// field validation (an unknown or misspelt field fails), then runs the Deployment's own
// arguments as its ServiceAccount (impersonated: the server authorizes with RBAC, so a
// permission rbac.yaml lacks fails the test): a Broker gets ready, its status written
// under that identity, and the Lease is taken in Sluice's namespace.
func TestDeployManifests(t *testing.T) {
	kubetest.Need(t, srv)
	_, sa := serveDeployed(t)
	namespace(t, "hello")
	apply(t, brokers, `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: default, namespace: hello, annotations: {eventing.knative.dev/broker.class: Sluice}}}`)
	waitFor(t, brokers, "hello", "default", "ready (status written as "+sa+")", ready)
	l, err := kubernetes.NewForConfigOrDie(srv.Config).CoordinationV1().Leases("sluice").Get(context.Background(), "sluice-status-writer", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		t.Errorf("the Lease sluice/sluice-status-writer: %v %+v", err, l)
	}
}

// serveDeployed creates deploy/kubernetes/knative/ on the API server (unless a test did
// already) and runs `sluice serve` with the Deployment's own arguments, and extra, as its
// ServiceAccount; it returns the server and that account's user name.
func serveDeployed(t *testing.T, extra ...string) (*sluicetest.Serve, string) {
	t.Helper()
	var dep *appsv1.Deployment
	for _, u := range manifests(t) {
		c := srv.Dynamic().Resource(resourceOf(t, u))
		var err error
		if u.GetNamespace() != "" {
			_, err = c.Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{FieldValidation: "Strict"})
		} else {
			_, err = c.Create(context.Background(), u, metav1.CreateOptions{FieldValidation: "Strict"})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if u.GetKind() == "Deployment" {
			dep = &appsv1.Deployment{}
			b, _ := u.MarshalJSON()
			if err := yaml.UnmarshalStrict(b, dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if dep == nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no Deployment of one container in %s", deployDir)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	sa := "system:serviceaccount:" + dep.Namespace + ":" + dep.Spec.Template.Spec.ServiceAccountName
	kc, err := srv.KubeconfigAs(sa)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range c.Args[1:] { // after "serve"
		switch {
		case strings.HasPrefix(a, "--addr="): // serve below listens on a free port
		case strings.HasPrefix(a, "--kubernetes-address-url="):
		default:
			args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", dep.Namespace))
		}
	}
	if c.Args[0] != "serve" {
		t.Fatalf("container args %v: want serve first", c.Args)
	}
	s := sluicetest.Start(t, sluiceBin, hang, append(append(args, "--kubeconfig", kc, "--kubernetes-status-interval", "200ms"), extra...)...)
	stopAtEnd(t, s)
	return s, sa
}
