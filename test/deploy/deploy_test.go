// Package deploy tests what can be tested here of deploy/kubernetes/ and the Dockerfile:
// the manifests parse into the Kubernetes API types and agree with each other and with
// the binary's flags, the ConfigMap's Knative manifests load as `sluice validate` reads
// them, and the binary built as the Dockerfile builds it is static and serves.
package deploy

import (
	"debug/elf"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-broker/sluice/internal/sluicetest"
)

const dir = "../../deploy/kubernetes"

// load parses one manifest strictly (unknown fields are errors) into v.
func load(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// manifests returns the parsed Deployment, Service, ConfigMap and PodDisruptionBudget.
func manifests(t *testing.T) (*appsv1.Deployment, *corev1.Service, *corev1.ConfigMap, *policyv1.PodDisruptionBudget) {
	var (
		d   appsv1.Deployment
		s   corev1.Service
		cm  corev1.ConfigMap
		pdb policyv1.PodDisruptionBudget
	)
	load(t, "deployment.yaml", &d)
	load(t, "service.yaml", &s)
	load(t, "configmap.yaml", &cm)
	load(t, "pdb.yaml", &pdb)
	for kind, got := range map[string]string{"Deployment": d.Kind, "Service": s.Kind, "ConfigMap": cm.Kind, "PodDisruptionBudget": pdb.Kind} {
		if got != kind {
			t.Errorf("kind %q, want %q", got, kind)
		}
	}
	return &d, &s, &cm, &pdb
}

// matches reports whether selector picks a pod labelled labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// flag returns the value of --name=VALUE in args.
func flag(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestManifests(t *testing.T) {
	d, svc, cm, pdb := manifests(t)
	pod := d.Spec.Template
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("Deployment replicas %v, want at least 2", d.Spec.Replicas)
	}
	if !matches(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	if !matches(svc.Spec.Selector, pod.Labels) {
		t.Errorf("Service selector %v does not match the pods' labels %v", svc.Spec.Selector, pod.Labels)
	}
	if pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("PodDisruptionBudget selector does not match the pods' labels %v", pod.Labels)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("container args %v, want sluice serve ...", c.Args)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if addr, _ := flag(c.Args, "addr"); addr != ":8080" || ports["http"] != 8080 {
		t.Errorf("--addr %q and container port http %d disagree", addr, ports["http"])
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort.String()]; !ok {
			t.Errorf("Service port %s targets %q, not a container port", p.Name, p.TargetPort.String())
		}
	}
	for name, probe := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port.String() != "http" {
			t.Errorf("probe of %s: %+v", name, probe)
		}
	}
	// SIGTERM comes after preStop; then Sluice drains for --shutdown-timeout. The grace
	// period must cover both.
	timeout, ok := flag(c.Args, "shutdown-timeout")
	if !ok {
		t.Fatal("no --shutdown-timeout in the container's args")
	}
	drain, err := time.ParseDuration(timeout)
	if err != nil {
		t.Fatal(err)
	}
	var sleep time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Error("no preStop sleep: endpoints may still send requests after SIGTERM")
	} else {
		sleep = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace < sleep+drain+time.Second {
		t.Errorf("terminationGracePeriodSeconds %s < preStop %s + --shutdown-timeout %s", grace, sleep, drain)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Error("pods must run as a non-root user")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the container's root filesystem should be read-only: Sluice writes nothing with an external NATS cluster")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	if ch, _ := flag(c.Args, "channel"); ch != "jetstream" && ch != "kafka" {
		t.Errorf("--channel %q: replicas share work only on jetstream or kafka", ch)
	}
	// The config volume is the ConfigMap, mounted where --config points.
	cfg, _ := flag(c.Args, "config")
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.MountPath == cfg {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--config %q is not the mount of ConfigMap %s", cfg, cm.Name)
	}
	// Every flag given exists: the binary would refuse to start otherwise.
	help, err := exec.Command(sluiceBin(t), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("serve --help: %v\n%s", err, help)
	}
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.Contains(string(help), "--"+name+" ") {
			t.Errorf("serve has no flag --%s", name)
		}
	}
}

// configDir writes the ConfigMap's data as files, as the kubelet mounts it.
func configDir(t *testing.T) string {
	_, _, cm, _ := manifests(t)
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestConfigMapValidates: `sluice validate` reads the ConfigMap's manifests and finds
// every object ready.
func TestConfigMapValidates(t *testing.T) {
	out, err := exec.Command(sluiceBin(t), "validate", configDir(t)).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice validate: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Trigger") {
		t.Errorf("validate listed no Trigger:\n%s", out)
	}
	t.Logf("sluice validate:\n%s", out)
}

// TestDockerBuildStarts builds the binary with the Dockerfile's go build line and
// environment, checks it is statically linked, and starts it on the ConfigMap's
// manifests: it serves /healthz and /readyz.
func TestDockerBuildStarts(t *testing.T) {
	bin := sluiceBin(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	sv := sluicetest.Start(t, bin, 20*time.Second, "--config", configDir(t))
	defer func() { _ = sv.Cmd.Process.Kill(); <-sv.Exited }()
	url := sv.Base
	for _, path := range []string{"/healthz", "/readyz"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get(url + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", path, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// sluiceBin builds the binary as the Dockerfile does (its ENV lines and its RUN go build
// line, the output path replaced), once per test binary.
func sluiceBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { built, buildErr = dockerBuild() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}
