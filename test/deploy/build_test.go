package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	built     string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// dockerBuild runs the Dockerfile's `RUN go build` line with /bin/sh -c, as docker
// does, in the repository's root with the Dockerfile's ENV settings, writing the binary
// to a temporary directory instead of /out.
func dockerBuild() (string, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	env := os.Environ()
	var run string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "ENV "); ok {
			env = append(env, strings.Fields(v)...)
		}
		if v, ok := strings.CutPrefix(line, "RUN go build "); ok {
			run = "go build " + v
		}
	}
	if run == "" {
		return "", fmt.Errorf("Dockerfile: no RUN go build line")
	}
	if !strings.Contains(strings.Join(env, "\n"), "CGO_ENABLED=0") {
		return "", fmt.Errorf("Dockerfile: no ENV CGO_ENABLED=0: the binary would not be static")
	}
	if buildDir, err = os.MkdirTemp("", "sluice-docker"); err != nil {
		return "", err
	}
	out := filepath.Join(buildDir, "sluice")
	if !strings.Contains(run, "-o /out/sluice ") {
		return "", fmt.Errorf("Dockerfile: the go build line %q does not write /out/sluice", run)
	}
	cmd := exec.Command("/bin/sh", "-c", strings.Replace(run, "-o /out/sluice ", "-o "+out+" ", 1))
	cmd.Dir, cmd.Env = root, env
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", run, err, b)
	}
	return out, nil
}
