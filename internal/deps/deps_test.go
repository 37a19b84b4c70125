package deps

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluice-broker/sluice"

// rules are what each package may import inside the module (paths without the module's
// prefix): for a package with non-test files, what those import; for a package of tests
// only (test/*), what its tests import. "x/*" stands for every package under x. Every
// package of the module has a row; docs/architecture.md shows the same table.
var rules = []struct {
	pkgs, imports []string
}{
	{[]string{"cmd/sluice"}, []string{"cmd/sluice/cli", "internal/sysmon"}},
	{[]string{"event"}, []string{"internal/httpascii"}},
	{[]string{"filter"}, []string{"event"}},
	{[]string{"config"}, []string{"filter"}},
	{[]string{"source/ping"}, []string{"config", "event", "internal/redact"}},
	{[]string{"dlq"}, []string{"event"}},
	{[]string{"dlq/dlqtest"}, []string{"dlq", "event"}},
	{[]string{"channel"}, []string{"dlq", "event"}},
	{[]string{"channel/memory"}, []string{"channel", "event"}},
	{[]string{"channel/jetstream", "channel/kafka", "channel/kinesis", "channel/rabbitmq"}, []string{"channel", "dlq", "event", "internal/ratelog"}},
	{[]string{"channel/kafka/kafkatest", "channel/kinesis/kinesistest", "channel/rabbitmq/rabbitmqtest"}, nil},
	{[]string{"channel/channeltest"}, []string{"channel", "event", "internal/sluicetest"}},
	{[]string{"channel/registry"}, []string{"channel", "channel/jetstream", "channel/kafka", "channel/kinesis", "channel/memory", "channel/rabbitmq", "config", "internal/bytesize"}},
	{[]string{"internal/tracing"}, []string{"event"}},
	{[]string{"ui"}, []string{"delivery", "internal/redact"}},
	{[]string{"delivery"}, []string{"channel", "delivery/h1", "dlq", "event", "internal/ratelog", "internal/redact", "internal/tracing", "overload"}},
	{[]string{"delivery/h1"}, []string{"internal/httpascii"}},
	{[]string{"overload"}, []string{"internal/cpubusy"}},
	{[]string{"broker"}, []string{"channel", "config", "delivery", "dlq", "event", "filter", "internal/ratelog", "internal/redact", "internal/tracing", "overload"}},
	{[]string{"auth"}, []string{"broker", "config", "filter"}},
	{[]string{"kube"}, []string{"config", "internal/kubetest", "internal/redact"}},
	{[]string{"internal/httpserver"}, []string{"internal/cpubusy", "internal/httpascii", "internal/tlsfiles"}},
	{[]string{"internal/tlsfiles", "internal/tlsfiles/tlstest", "internal/httpascii", "internal/cpubusy", "internal/ratelog", "internal/bytesize", "internal/redact", "internal/syncbuf", "internal/sysmon", "internal/deps", "internal/kubetest"}, nil},
	{[]string{"cmd/sluice/cli"}, []string{"auth", "broker", "channel/registry", "config", "delivery", "dlq", "internal/bytesize", "kube", "internal/httpserver", "internal/ratelog", "internal/redact", "internal/tlsfiles", "internal/tracing", "loadtest/*", "overload", "source/ping", "ui"}},
	{[]string{"loadtest/*"}, []string{"event", "internal/httpserver", "loadtest/*"}},
	{[]string{"scripts/benchsuite", "scripts/securebench"}, []string{"internal/sluicetest", "loadtest/*"}},
	{[]string{"test/e2e"}, []string{"channel/kafka", "channel/kafka/kafkatest", "channel/kinesis", "channel/kinesis/kinesistest", "channel/rabbitmq/rabbitmqtest", "internal/sluicetest", "internal/syncbuf", "loadtest/*"}},
	{[]string{"test/cluster"}, []string{"internal/sluicetest", "internal/syncbuf", "loadtest/pacer"}},
	{[]string{"internal/sluicetest"}, []string{"internal/syncbuf", "loadtest/pacer"}},
	{[]string{"test/deploy"}, []string{"internal/sluicetest"}},
	{[]string{"test/kubernetes"}, []string{"internal/kubetest", "internal/sluicetest"}},
	{[]string{"test/faults"}, []string{"internal/sluicetest", "internal/syncbuf", "loadtest/pacer", "loadtest/report"}},
	{[]string{"test/faults/natsd", "test/faults/report"}, nil},
}

// matches reports whether the package path p is pattern or, for "x/*", under x.
func matches(pattern, p string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		return strings.HasPrefix(p, prefix+"/")
	}
	return p == pattern
}

// allowed returns the imports the row of package p allows, and whether p has a row.
// A row naming p exactly wins over a pattern.
func allowed(p string) ([]string, bool) {
	var found []string
	ok := false
	for _, r := range rules {
		for _, q := range r.pkgs {
			switch {
			case q == p:
				return r.imports, true
			case matches(q, p) && !ok:
				found, ok = r.imports, true
			}
		}
	}
	return found, ok
}

type listed struct {
	ImportPath                         string
	GoFiles                            []string
	Imports, TestImports, XTestImports []string
}

// inModule returns the paths of ps inside the module, without its prefix, sorted and
// without duplicates.
func inModule(ps ...[]string) []string {
	var out []string
	for _, l := range ps {
		for _, p := range l {
			if rest, ok := strings.CutPrefix(p, module+"/"); ok {
				out = append(out, rest)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestImportRules checks every package's imports inside the module against its row of
// rules: an import no row allows, or a package with no row, fails.
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		n++
		p := strings.TrimPrefix(l.ImportPath, module+"/")
		imports := inModule(l.Imports)
		what := "imports"
		if len(l.GoFiles) == 0 { // tests only
			imports, what = inModule(l.TestImports, l.XTestImports), "tests import"
		}
		ok, has := allowed(p)
		if !has {
			t.Errorf("%s: no row in the import rules; add one here and in docs/architecture.md", p)
			continue
		}
		for _, imp := range imports {
			if imp == p || slices.ContainsFunc(ok, func(a string) bool { return matches(a, imp) }) {
				continue
			}
			t.Errorf("%s %s %s, which its row (%s) does not allow", p, what, imp, strings.Join(ok, ", "))
		}
	}
	if n < 10 {
		t.Fatalf("go list listed %d packages; want the whole module", n)
	}
}

// TestDocShowsRules: the table of docs/architecture.md names, for every row of rules,
// the same packages and the same imports (each a `backticked` path in its column, or
// "nothing of the module").
func TestDocShowsRules(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := regexp.MustCompile("`([^`]+)`")
	names := func(cell string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	doc := map[string][]string{} // package → imports
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| package | holds | imports (inside the module) |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "| ---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("architecture.md: row %q: want 3 cells", line)
		}
		imps := names(cells[2])
		if len(imps) == 0 && strings.TrimSpace(cells[2]) != "nothing of the module" {
			t.Errorf("architecture.md: row %q: imports neither `named` nor \"nothing of the module\"", line)
		}
		for _, p := range names(cells[0]) {
			doc[p] = imps
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(doc) == 0 {
		t.Fatal("architecture.md: no table of packages and imports")
	}
	for _, r := range rules {
		want := slices.Sorted(slices.Values(r.imports))
		for _, p := range r.pkgs {
			got, ok := doc[p]
			switch {
			case !ok:
				t.Errorf("architecture.md: no row for %s", p)
			case !slices.Equal(got, want):
				t.Errorf("architecture.md: %s imports %v, the rules say %v", p, got, want)
			}
			delete(doc, p)
		}
	}
	for p := range doc {
		t.Errorf("architecture.md: row for %s, which has no rule", p)
	}
}
