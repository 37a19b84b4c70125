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
