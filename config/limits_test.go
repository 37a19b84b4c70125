package config

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// aliasBomb is a small YAML document whose aliases expand to n copies of a value of size
// bytes: 2,000 copies of 100 KB fit in a 110 KB file and expand to 200 MB.
func aliasBomb(size, n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  big: &big \"")
	b.WriteString(strings.Repeat("x", size))
	b.WriteString("\"\n  many: [")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("*big")
	}
	b.WriteString("]\n")
	return b.String()
}

// allocated runs f and returns the bytes it allocated (a count, not a rate).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestConfigBounds: a configuration that is too large, or whose aliases expand too far,
// is refused before it is expanded, with an error naming the file and the limit, and
// reading it costs little memory.
func TestConfigBounds(t *testing.T) {
	dir := t.TempDir()
	bomb := filepath.Join(dir, "bomb.yaml")
	if err := os.WriteFile(bomb, []byte(aliasBomb(100_000, 2_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(bomb); fi.Size() > 110<<10 {
		t.Fatalf("the bomb is %d bytes, want at most 110 KB", fi.Size())
	}
	// Sparse files: their size is what Stat says, and nothing needs to be read to refuse them.
	sparse := func(name string, size int64) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	big := sparse("big.yaml", MaxConfigBytes+1)
	halves := t.TempDir()
	for _, n := range []string{"a.yaml", "b.yaml"} {
		if err := os.Rename(sparse(n, MaxConfigBytes/2+1), filepath.Join(halves, n)); err != nil {
			t.Fatal(err)
		}
	}
	refsBomb := filepath.Join(dir, "refs.yml")
	if err := os.WriteFile(refsBomb, []byte("- &e {apiVersion: v1, kind: Service, name: s, url: \"http://a/"+strings.Repeat("x", 100_000)+"\"}\n"+strings.Repeat("- *e\n", 2_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "good.yaml")
	if err := os.WriteFile(good, []byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name  string
		path  string
		opts  []Option
		wants []string
	}{
		{"aliases", bomb, nil, []string{bomb, "expand to more than 64 MiB", "MaxExpandedBytes"}},
		{"a file too large", big, nil, []string{big, "larger than 32 MiB", "MaxConfigBytes"}},
		{"a directory too large", halves, nil, []string{filepath.Join(halves, "b.yaml"), "together are larger than 32 MiB"}},
		{"a refs file of aliases", good, []Option{WithRefsFile(refsBomb)}, []string{refsBomb, "expands to more than 64 MiB"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			alloc := allocated(func() { _, err = Read([]string{tt.path}, tt.opts...) })
			if err == nil {
				t.Fatal("read, want an error")
			}
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if alloc > 64<<20 {
				t.Errorf("refusing it allocated %d MiB, want under 64 MiB", alloc>>20)
			}
		})
	}
}

// TestEmbeddedYAMLBound: a ConfigMap value Sluice reads as YAML may not expand past
// MaxEmbeddedYAMLBytes; the Broker that uses it is not ready, naming the value.
func TestEmbeddedYAMLBound(t *testing.T) {
	// 200 uses of a 10 KB string: 2 MB.
	value := "x: &a \"" + strings.Repeat("n", 10_000) + "\"\nclusterDefault: {brokerClass: [" + strings.Repeat("*a, ", 199) + "*a]}"
	var indented strings.Builder
	for _, line := range strings.Split(value, "\n") {
		indented.WriteString("    " + line + "\n")
	}
	var cfg *Config
	alloc := allocated(func() {
		cfg = loadString(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-br-defaults, namespace: knative-eventing}\ndata:\n  default-br-config: |\n"+
			indented.String()+"---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\n")
	})
	var b ObjectStatus
	for _, o := range cfg.Objects {
		if o.Kind == "Broker" {
			b = o
		}
	}
	if b.Ready || !strings.Contains(b.Reason, "data.default-br-config: expands to more than 1 MiB") {
		t.Errorf("broker %+v; want not ready, naming the ConfigMap value and the limit", b)
	}
	if alloc > 64<<20 {
		t.Errorf("reading it allocated %d MiB, want under 64 MiB", alloc>>20)
	}
}

// TestConfigMapDecodedOnce: a ConfigMap value read as YAML is decoded once, however many
// brokers use it, so a large value times many brokers costs one decode, not one each.
func TestConfigMapDecodedOnce(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-br-defaults, namespace: knative-eventing}\ndata:\n  default-br-config: |\n")
	b.WriteString("    clusterDefault: {brokerClass: MTChannelBasedBroker, apiVersion: v1, kind: ConfigMap, name: chan, namespace: knative-eventing}\n")
	b.WriteString("    namespaceDefaults:\n")
	for i := range 5_000 { // about 500 KB of namespaces
		b.WriteString("      ns" + itoa(i) + ": {brokerClass: MTChannelBasedBroker, name: chan, namespace: knative-eventing}\n")
	}
	b.WriteString("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: chan, namespace: knative-eventing}\ndata:\n  channel-template-spec: |\n    apiVersion: messaging.knative.dev/v1\n    kind: InMemoryChannel\n")
	const brokers = 500
	for i := range brokers {
		b.WriteString("---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b" + itoa(i) + "}\n")
	}
	var cfg *Config
	alloc := allocated(func() { cfg = loadString(t, b.String()) })
	if err := cfg.Err(); err != nil || len(cfg.Brokers) != brokers || cfg.Brokers[0].Channel != ChannelMemory {
		t.Fatalf("%v; %d brokers", err, len(cfg.Brokers))
	}
	if alloc > 256<<20 {
		t.Errorf("reading %d brokers that share a 500 KB ConfigMap value allocated %d MiB, want under 256 MiB", brokers, alloc>>20)
	}
}
