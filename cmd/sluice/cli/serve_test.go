package cli

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-broker/sluice/internal/syncbuf"
)

// lockedBuffer is the log of a process or server that the test reads while it runs.
type lockedBuffer = syncbuf.Buffer

// keepGC restores the GC settings serve changes for the process.
func keepGC(t *testing.T) {
	limit, percent := debug.SetMemoryLimit(-1), debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	t.Cleanup(func() { debug.SetMemoryLimit(limit); debug.SetGCPercent(percent) })
}

// TestServeRejectsBadChannelFlags checks the backend flags reach the registry: an
// unknown --channel, or a durable one without its connection flag, stops serve before
// it listens, naming the flag.
func TestServeRejectsBadChannelFlags(t *testing.T) {
	keepGC(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--channel", "rabbit"}, `--channel "rabbit": unknown channel backend; known: memory, jetstream, kafka`},
		{[]string{"--channel", "kafka"}, "--channel kafka needs --kafka-brokers"},
		{[]string{"--jetstream-max-bytes", "lots"}, "not a positive size"},
	} {
		var stderr lockedBuffer
		code := Execute(context.Background(), append([]string{"serve", "--addr", "127.0.0.1:0"}, tt.args...), &lockedBuffer{}, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want an error containing %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// TestServeStopsEverything runs serve with a watched config until its context ends: it
// exits 0, and every goroutine it started (HTTP server, config watcher, dispatchers) has
// ended when Execute returns.
func TestServeStopsEverything(t *testing.T) {
	keepGC(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: ns}\n---\n" +
		"apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: ns}\n" +
		"spec: {broker: b, subscriber: {uri: \"http://127.0.0.1:9/\"}}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Execute(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--config", cfg, "--reload-interval", "10ms",
			"--shutdown-timeout", "2s"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "ingest: ") {
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no ingest URL in 10s:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few rounds of the watcher
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("serve did not exit 10s after its context ended:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "shut down; every queued event was delivered") {
		t.Errorf("no clean shutdown in the log:\n%s", stderr.String())
	}
}

// TestServeRejectsBadSecurityFlags: security flags that mean nothing alone stop serve
// before it listens, naming the flag.
func TestServeRejectsBadSecurityFlags(t *testing.T) {
	keepGC(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth-default", "deny-all"}, "--auth-default: needs --oidc-issuer or --tls-client-ca"},
		{[]string{"--auth-default", "allow-some", "--oidc-issuer", "https://x"}, `--auth-default "allow-some"`},
		{[]string{"--plain-addr", "127.0.0.1:0"}, "--plain-addr: only with --tls-cert"},
		{[]string{"--tls-require-client-cert"}, "--tls-require-client-cert: needs --tls-client-ca"},
		{[]string{"--oidc-jwks-file", "k.json"}, "only with --oidc-issuer"},
		{[]string{"--oidc-allow-http"}, "only with --oidc-issuer"},
		{[]string{"--oidc-issuer", "https://x", "--oidc-jwks-url", "http://127.0.0.1:9/keys"}, "--oidc-jwks-url http://127.0.0.1:9/keys: plain HTTP lets anyone on the path substitute the issuer's keys; use https, or give --oidc-allow-http"},
		{[]string{"--ops-token-file", "/nonexistent"}, "--ops-token-file: open /nonexistent"},
		{[]string{"--oidc-token", "nofile"}, `--oidc-token "nofile": want AUDIENCE=FILE`},
		{[]string{"--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"}, "--tls-cert/--tls-key"},
		{[]string{"--namespace-memory-share", "0"}, "WithNamespaceShare(0)"},
		{[]string{"--max-inflight-body-bytes", "512KiB"}, "--max-inflight-body-bytes 524288 is less than --max-event-bytes 1MiB"},
	} {
		var stderr lockedBuffer
		code := Execute(context.Background(), append([]string{"serve", "--addr", "127.0.0.1:0"}, tt.args...), &lockedBuffer{}, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want an error containing %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}
