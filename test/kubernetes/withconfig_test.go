package kubernetes

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubernetesWithConfigRefused: `sluice serve --kubernetes --config FILE` is refused
// at start, before it listens or reads anything, saying to give one of the two and how
// to add a file's objects to the cluster.
func TestKubernetesWithConfigRefused(t *testing.T) {
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, []byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	for _, args := range [][]string{
		{"serve", "--kubernetes", "--config", f, "--addr", "127.0.0.1:0"},
		{"serve", "-c", f, "--kubernetes", "--kubeconfig", "none", "--addr", "127.0.0.1:0"},
	} {
		out, err := exec.CommandContext(ctx, sluiceBin, args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("sluice %v: %v, want exit status 1; output:\n%s", args, err, out)
		}
		const want = "--kubernetes and --config: give one, not both: with --kubernetes every object is read from the API server (`kubectl apply -f` a file to add its objects there)"
		if !strings.Contains(string(out), want) || strings.Contains(string(out), "sluice serving") {
			t.Errorf("sluice %v said:\n%s\nwant only the refusal: %s", args, out, want)
		}
	}
}
