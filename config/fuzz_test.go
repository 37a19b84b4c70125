package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hangAfter is how long one read may take before the fuzzer calls it a hang: generous,
// since a read of a small input takes well under a millisecond.
const hangAfter = 5 * time.Second

// FuzzRead feeds arbitrary YAML through the loader: it must never panic, give every
// object it found a status, answer the same for the same bytes, and Load (the strict
// path) must succeed exactly when Read reports no error.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"testdata/demo.yaml", "testdata/channels.yaml", "testdata/knative-trigger.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: ns}\nspec:\n  broker: b\n  filters: [{cesql: \"type = 'x'\"}]\n  subscriber: {uri: http://127.0.0.1:1/}\n"))
	f.Add([]byte("---\n---\nkind: List\nitems: [{kind: Broker}]\n"))
	f.Add([]byte("apiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: p}\nspec: {schedule: '@every 1s', sink: {uri: http://x/}}\n"))
	f.Add([]byte("{a: [1, {b: *c}]}"))
	st, err := newSettings(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg *Config
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			cfg, err = load([]fileData{{name: "fuzz.yaml", data: b}}, nil, st)
		}()
		select {
		case <-done:
		case <-time.After(hangAfter):
			t.Fatalf("reading %d bytes did not finish in %s", len(b), hangAfter)
		}
		if err != nil {
			// Only a document that expands past the bound is refused as a whole, naming
			// the file and the bound.
			if !strings.Contains(err.Error(), "fuzz.yaml") || !strings.Contains(err.Error(), "MaxExpandedBytes") {
				t.Fatalf("load: %v", err)
			}
			return
		}
		for _, o := range cfg.Objects {
			if !o.Ready && o.Reason == "" {
				t.Fatalf("object %+v is not ready and says nothing about why", o)
			}
		}
		again, err := load([]fileData{{name: "fuzz.yaml", data: b}}, nil, st)
		if err != nil {
			t.Fatalf("a second load of the same bytes fails: %v", err)
		}
		if errString(cfg.Err()) != errString(again.Err()) {
			t.Fatalf("two reads of the same bytes differ:\n%v\n%v", cfg.Err(), again.Err())
		}
		if len(b) > 4096 {
			return // the file round trip below costs a write; keep it for small inputs
		}
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, lerr := Load(path)
		if (lerr == nil) != (cfg.Err() == nil) {
			t.Fatalf("Load error %v, Read error %v", lerr, cfg.Err())
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
