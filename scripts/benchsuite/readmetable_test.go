package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureResults reads testdata/results.json: a full run with memory, jetstream, a
// memory overload and the floor, but no kafka scenario.
func fixtureResults(t *testing.T) *results {
	t.Helper()
	js, err := os.ReadFile(filepath.Join("testdata", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r results
	if err := json.Unmarshal(js, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

const (
	docHead = "# Sluice\n\nintro\n\n## Performance\n\ntext before\n\n"
	docTail = "\n\ntext after\n\n## The command line\n\nmore | text\n"
	oldBody = "\n| | Sluice | reference reports |\n| --- | --- | --- |\n| stale | 20,700 events/s | x |\n"
)

// wantFixtureTable is the table rendered from testdata/results.json with the suite's
// README at docs/benchmarks/README.md beside a README.md at the root.
const wantFixtureTable = `
| | Sluice | reference reports |
| --- | --- | --- |
| memory broker, 1 trigger, sustained with zero loss | 16,000 events/s | Knative IMC dispatcher 2,000/s (4 vCPU); MT broker ~12,000/s on 25 pods |
| end-to-end p99 at half that rate | 1.5 ms at 8,000 events/s | Knative broker p90 ~400 ms |
| jetstream (durable) channel | 12,345 events/s, e2e p99 7.2 ms at half rate | Knative Kafka broker breaks at 1,100/s, e2e 400–500 ms |
| kafka channel (Kafka on the same machine) | not run |  |
| overload at 2× the memory broker's sustained rate | 320,000 × 2xx, 1,500 × 429, 2 × 503, 0 other (10 of the probe's 10 429s with Retry-After); peak RSS 169 MiB; 0 accepted events lost | IMC OOM-killed; TriggerMesh grew to 1.2 GB |
| steady rate: the memory broker at half its sustained rate | 8,000 events/s: 61 µs of broker CPU per event; peak RSS 70 MiB (over the ramp and this run) |  |
| broker CPU per event ÷ nginx proxy_pass's, same load | the proxy alone on 1 core: 1.10× at 5,000 events/s, 1.25× at 17,600 events/s; all on the same cores: 1.50× at 5,000 events/s |  |

From the run of 2026-01-02 03:04 UTC at commit abc1234 (` + "`go run ./scripts/benchsuite --sluice bin/sluice`" + `, a full run, not --quick) on 2 logical cores (Test CPU), the broker on CPU 1, load generator and receivers on CPU 0, 2 KiB events over 127.0.0.1. Every step, verdict and plot: [docs/benchmarks/](docs/benchmarks/README.md).

`

func TestWriteReadmeTable(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "README.md")
	if err := os.WriteFile(name, []byte(docHead+tableBegin+oldBody+tableEnd+docTail), 0o644); err != nil {
		t.Fatal(err)
	}
	skipped, err := writeReadmeTable(name, filepath.Join(dir, "docs", "benchmarks", "README.md"), fixtureResults(t))
	if err != nil || skipped != "" {
		t.Fatalf("writeReadmeTable = %q, %v", skipped, err)
	}
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if want := docHead + tableBegin + wantFixtureTable + tableEnd + docTail; string(got) != want {
		t.Errorf("README.md =\n%s\nwant\n%s", got, want)
	}
}

func TestReadmeTableQuickLeavesItAlone(t *testing.T) {
	name := filepath.Join(t.TempDir(), "README.md")
	doc := docHead + tableBegin + oldBody + tableEnd + docTail
	if err := os.WriteFile(name, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r := fixtureResults(t)
	r.Quick = true
	skipped, err := writeReadmeTable(name, "docs/benchmarks/README.md", r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(skipped, "--quick") {
		t.Errorf("skipped = %q, want it to name --quick", skipped)
	}
	if got, _ := os.ReadFile(name); string(got) != doc {
		t.Errorf("a --quick run changed README.md:\n%s", got)
	}
}

func TestSpliceTable(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      string // the result, or the error's text
		fail      bool
	}{
		{"replaces between the markers", "a\n" + tableBegin + "\nold\n" + tableEnd + "\nb", "a\n" + tableBegin + "\nNEW\n" + tableEnd + "\nb", false},
		{"empty table", "a" + tableBegin + tableEnd + "b", "a" + tableBegin + "\nNEW\n" + tableEnd + "b", false},
		{"no begin marker", "a\nold\n" + tableEnd, "no " + tableBegin + " marker", true},
		{"no end marker", tableBegin + "\nold\n", "no " + tableEnd + " marker", true},
		{"no markers at all", "just text", "no " + tableBegin + " marker", true},
		{"begin twice", tableBegin + tableBegin + tableEnd, "marker " + tableBegin + " appears 2 times, want once", true},
		{"end before begin", tableEnd + "x" + tableBegin, "marker " + tableEnd + " comes before " + tableBegin, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := spliceTable(tc.doc, "NEW\n")
			switch {
			case tc.fail && (err == nil || err.Error() != tc.want):
				t.Errorf("spliceTable error = %v, want %q", err, tc.want)
			case !tc.fail && (err != nil || got != tc.want):
				t.Errorf("spliceTable = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestWriteReadmeTableMissingMarker(t *testing.T) {
	name := filepath.Join(t.TempDir(), "README.md")
	doc := docHead + tableBegin + oldBody + docTail
	if err := os.WriteFile(name, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := writeReadmeTable(name, "docs/benchmarks/README.md", fixtureResults(t))
	if err == nil || !strings.Contains(err.Error(), tableEnd) || !strings.Contains(err.Error(), name) {
		t.Errorf("writeReadmeTable error = %v, want one naming %s and %s", err, name, tableEnd)
	}
	if got, _ := os.ReadFile(name); string(got) != doc {
		t.Error("README.md changed despite the error")
	}
	if err := checkReadmeTable(name); err == nil || !strings.Contains(err.Error(), tableEnd) {
		t.Errorf("checkReadmeTable error = %v, want one naming %s", err, tableEnd)
	}
}

// TestRerenderReadmeTable runs --rerender's path on the fixture: both READMEs are
// written, and with a marker missing neither is.
func TestRerenderReadmeTable(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "docs", "benchmarks")
	if err := os.MkdirAll(filepath.Join(out, "results"), 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join("testdata", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "results", "results.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(dir, "README.md")
	if err := os.WriteFile(readme, []byte(docHead+tableBegin+oldBody+docTail), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rerenderREADME(out, readme); err == nil || !strings.Contains(err.Error(), tableEnd) {
		t.Fatalf("rerenderREADME error = %v, want one naming %s", err, tableEnd)
	}
	if _, err := os.Stat(filepath.Join(out, "README.md")); err == nil {
		t.Error("rerenderREADME wrote the suite's README despite the missing marker")
	}
	if err := os.WriteFile(readme, []byte(docHead+tableBegin+oldBody+tableEnd+docTail), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rerenderREADME(out, readme); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(readme); string(got) != docHead+tableBegin+wantFixtureTable+tableEnd+docTail {
		t.Errorf("README.md after --rerender =\n%s", got)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "README.md")); !strings.Contains(string(got), "# Sluice benchmarks") {
		t.Error("the suite's README was not written")
	}
}

func TestReadmeTarget(t *testing.T) {
	for _, tc := range []struct {
		out, readme string
		set         bool
		want        string
	}{
		{"docs/benchmarks", "README.md", false, "README.md"},
		{"./docs/benchmarks/", "README.md", false, "README.md"},
		{"/tmp/bench", "README.md", false, ""},
		{"/tmp/bench", "/tmp/R.md", true, "/tmp/R.md"},
		{"docs/benchmarks", "", true, ""},
	} {
		if got := readmeTarget(tc.out, tc.readme, tc.set); got != tc.want {
			t.Errorf("readmeTarget(%q, %q, %v) = %q, want %q", tc.out, tc.readme, tc.set, got, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 13785.4: "13,785", 1234567: "1,234,567", -12000: "-12,000"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}
