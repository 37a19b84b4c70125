package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sluice.yaml")
	write := func(s string) {
		t.Helper()
		// As editors do: write a temporary file, then rename it over the original.
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	broker := func(retry string) string {
		return "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\nspec: {delivery: {retry: " + retry + "}}\n" +
			"---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t}\nspec: {broker: b, subscriber: {uri: \"http://127.0.0.1:9/\"}}\n"
	}
	write(broker("1"))

	applied := make(chan *Config, 10)
	failed := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Watch(ctx, dir, 20*time.Millisecond, func(c *Config) { applied <- c }, func(err error) { failed <- err })
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()

	expectApply := func(retry int) {
		t.Helper()
		select {
		case c := <-applied:
			if len(c.Brokers) != 1 || len(c.Brokers[0].Triggers) != 1 {
				t.Fatalf("config %+v", c)
			}
			if got := c.Brokers[0].Key(); got != "default/b" {
				t.Fatalf("broker %s", got)
			}
			if got := c.Brokers[0].Triggers[0].Delivery.Retry; got != retry {
				t.Fatalf("retry %d, want %d", got, retry)
			}
			if len(c.Files) != 1 || c.Files[0] != p {
				t.Fatalf("files %v", c.Files)
			}
		case err := <-failed:
			t.Fatalf("onError(%v), want apply", err)
		case <-time.After(20 * time.Second): // bounds a hang
			t.Fatal("apply not called within 20s")
		}
	}
	expectError := func(want string) {
		t.Helper()
		select {
		case err := <-failed:
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("onError(%v), want %q", err, want)
			}
		case c := <-applied:
			t.Fatalf("apply(%+v), want onError", c)
		case <-time.After(20 * time.Second): // bounds a hang
			t.Fatal("onError not called within 20s")
		}
	}
	expectNothing := func() {
		t.Helper()
		select {
		case c := <-applied:
			t.Fatalf("apply(%+v) without a change", c)
		case err := <-failed:
			t.Fatalf("onError(%v) without a change", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	expectApply(1) // the state at start
	expectNothing()
	write(broker("2"))
	expectApply(2)
	// An invalid edit of one object keeps its last good version running, reported not
	// ready with the reason; the other objects apply as they are.
	write(broker("-1") + "---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t2}\nspec: {broker: b, subscriber: {uri: \"http://127.0.0.1:9/2\"}}\n")
	select {
	case c := <-applied:
		if len(c.Brokers) != 1 || len(c.Brokers[0].Triggers) != 2 || c.Brokers[0].Triggers[0].Delivery.Retry != 2 {
			t.Fatalf("config after an invalid edit of the broker: %+v", c.Brokers)
		}
		b := c.Objects[0]
		if b.Ready || !strings.Contains(b.Reason, "spec.delivery.retry: -1 is negative") || !strings.Contains(b.Reason, "the last good version runs") {
			t.Fatalf("broker status %+v", b)
		}
		if !c.Objects[2].Ready || c.Objects[2].Name != "t2" {
			t.Fatalf("new trigger status %+v", c.Objects[2])
		}
	case err := <-failed:
		t.Fatalf("onError(%v), want apply", err)
	case <-time.After(20 * time.Second): // bounds a hang
		t.Fatal("apply not called within 20s")
	}
	expectNothing() // a state is reported once
	write(broker("3"))
	expectApply(3)
	// A second file in the directory is a change too.
	if err := os.WriteFile(filepath.Join(dir, "more.yml"), []byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: c}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-applied:
		if len(c.Brokers) != 2 {
			t.Fatalf("brokers %+v", c.Brokers)
		}
	case err := <-failed:
		t.Fatal(err)
	case <-time.After(20 * time.Second): // bounds a hang
		t.Fatal("new file not seen within 20s")
	}
	// Removing the directory is an error, reported, and the watch goes on.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	expectError("no such file or directory")
}

// TestWatchKeepsObjectsOfAnEmptyFile: an editor that writes a file in place empties it
// first. An empty file, or one that no longer parses, keeps the last good version of
// every object it held (reported not ready, saying why); a good file applies again.
func TestWatchKeepsObjectsOfAnEmptyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	brokers := func(names ...string) string {
		var b strings.Builder
		for _, n := range names {
			b.WriteString("---\napiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: " + n + "}\n")
		}
		return b.String()
	}
	if err := os.WriteFile(p, []byte(brokers("a", "b")), 0o644); err != nil {
		t.Fatal(err)
	}
	applied := make(chan *Config, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Watch(ctx, p, 10*time.Millisecond, func(c *Config) { applied <- c }, func(err error) { t.Errorf("onError(%v)", err) })
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()
	expect := func(reason string, names ...string) {
		t.Helper()
		select {
		case c := <-applied:
			var got []string
			for _, b := range c.Brokers {
				got = append(got, b.Name)
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				t.Fatalf("brokers %v, want %v", got, names)
			}
			for _, o := range c.Objects {
				if o.Name != "" && !strings.Contains(o.Reason, reason) { // not the broken document itself
					t.Errorf("%s: reason %q, want %q", o.Key(), o.Reason, reason)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatal("apply not called within 20 s")
		}
	}
	expect("", "a", "b")
	for _, tt := range []struct {
		name, content, reason string
		brokers               []string
	}{
		{"emptied", "", "its file is empty, taken for a write in progress; the last good version runs", []string{"a", "b"}},
		{"written again", brokers("a", "c"), "", []string{"a", "c"}},
		{"white space only", "\n  \n", "its file is empty", []string{"a", "c"}},
		{"broken", "apiVersion: eventing.knative.dev/v1\nkind: [Broker\n", "its file is invalid (document 1: invalid YAML", []string{"a", "c"}},
		{"only a comment: its objects are removed", "# nothing here\n", "", nil},
	} {
		// Emptied in place, as an editor that saves in place does first; the other
		// contents are renamed over the file, so that no state between is seen.
		if tt.content == "" {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := os.WriteFile(p+".tmp", []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(p+".tmp", p); err != nil {
				t.Fatal(err)
			}
		}
		t.Log(tt.name)
		expect(tt.reason, tt.brokers...)
	}
}

// TestWatchReadsOnlyWhatChanged: a tick reads the files only when their names, sizes,
// modification times or identities changed (and held still for a tick), or when
// WatchRereadInterval has passed; an unchanged configuration is not read on every tick.
func TestWatchReadsOnlyWhatChanged(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sluice.yaml")
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(p, []byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: "+name+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	st, err := newSettings(nil)
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	w := &watcher{path: p, st: st, first: true,
		apply:   func(c *Config) { applied = append(applied, c.Brokers[0].Name) },
		onError: func(err error) { t.Fatal(err) }}
	ticks := func(n, reads int, brokers string) {
		t.Helper()
		for range n {
			w.check()
		}
		if w.reads != reads || strings.Join(applied, ",") != brokers {
			t.Fatalf("after %d more ticks: %d reads, applied %v; want %d reads, applied %s", n, w.reads, applied, reads, brokers)
		}
	}
	ticks(100, 1, "a") // the first tick reads; the others only look
	write("bb")        // another size, in place
	ticks(1, 1, "a")   // seen changing: read once it holds still
	ticks(1, 2, "a,bb")
	ticks(100, 2, "a,bb")

	// An edit that keeps the size and the modification time is not seen by the stamps...
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	write("cc")
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	ticks(100, 2, "a,bb")
	// ...until the slow re-read.
	w.lastRead = w.lastRead.Add(-WatchRereadInterval)
	ticks(1, 3, "a,bb,cc")
	// A re-read of the same content applies nothing.
	w.lastRead = w.lastRead.Add(-WatchRereadInterval)
	ticks(1, 4, "a,bb,cc")

	// A file renamed over it is another file, even with the same size and time.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte("apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: dd}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	ticks(2, 5, "a,bb,cc,dd")
}

// BenchmarkWatchIdleTick is one tick of the watcher over an unchanged 16 MB
// configuration: it looks at the file and does not read it.
func BenchmarkWatchIdleTick(b *testing.B) {
	p := filepath.Join(b.TempDir(), "sluice.yaml")
	data := "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b}\n" + strings.Repeat("# padding padding padding padding padding padding padding padding\n", 16<<20/66)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		b.Fatal(err)
	}
	st, err := newSettings(nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &watcher{path: p, st: st, first: true, apply: func(*Config) {}, onError: func(err error) { b.Fatal(err) }}
	w.check()
	for b.Loop() {
		w.check()
	}
	if w.reads != 1 {
		b.Fatalf("%d reads, want 1", w.reads)
	}
}
