package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
)

// lastFrame returns the last complete frame top drew on the terminal: what follows the
// last clear-screen sequence, as lines.
func lastFrame(screen string) []string {
	i := strings.LastIndex(screen, frameStart)
	if i < 0 {
		return nil
	}
	// The terminal's own output processing turns top's \r\n into \r\r\n: a carriage
	// return moves nothing on screen, so drop them all.
	f := strings.TrimSuffix(strings.ReplaceAll(screen[i+len(frameStart):], "\r", ""), "\n")
	return strings.Split(f, "\n")
}

// row returns the fields of the frame's line starting with name.
func row(frame []string, name string) []string {
	for _, l := range frame {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

// TestTopOnATerminal runs `sluice serve` and `sluice top` in-process, top writing to a
// pseudo-terminal of 30×100 as a user's terminal would be, and reads the screen: the
// broker's and the trigger's rows count the events sent, a dead letter's reason shows,
// the header's clock moves as top redraws every second, every line fits the width, and
// Ctrl-C (the context) restores the screen.
func TestTopOnATerminal(t *testing.T) {
	keepGC(t)
	sink := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Ce-Type") == "bad" {
			http.Error(w, "no schema for bad", http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	sinkLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go sink.Serve(sinkLn)
	defer sink.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: shop, namespace: demo}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: orders, namespace: demo}
spec: {broker: shop, subscriber: {uri: "http://%s/"}, delivery: {retry: 0}}
`, sinkLn.Addr())
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	sctx, stopServe := context.WithCancel(context.Background())
	served := make(chan int, 1)
	var serveLog lockedBuffer
	go func() {
		// The dead-letter store off: the failed event is undeliverable, as top shows it.
		served <- Execute(sctx, []string{"serve", "--config", p, "--addr", addr, "--dlq-max-entries", "0"}, io.Discard, &serveLog)
	}()
	defer func() {
		stopServe()
		<-served
	}()
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never became ready: %s", serveLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	send := func(id, typ string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/demo/shop", strings.NewReader("{}"))
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", id)
		req.Header.Set("Ce-Source", "/top-test")
		req.Header.Set("Ce-Type", typ)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("ingress: %s", resp.Status)
		}
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	var screen lockedBuffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, ptmx); close(copied) }()
	tctx, stopTop := context.WithCancel(context.Background())
	topped := make(chan int, 1)
	go func() { topped <- Execute(tctx, []string{"top", "--addr", addr}, tty, tty) }()

	for i := range 20 {
		send(fmt.Sprint("ok-", i), "order.created")
	}
	send("bad-1", "bad")

	// The screen shows the 21 events accepted, 20 delivered and the one dead letter.
	var frame []string
	var first string
	deadline = time.Now().Add(15 * time.Second)
	for {
		frame = lastFrame(screen.String())
		b, tr := row(frame, "demo/shop"), row(frame, "demo/orders")
		if first == "" && len(frame) > 0 {
			first = frame[0]
		}
		if len(b) >= 5 && b[3] == "21" && len(tr) == 11 && tr[8] == "20" && tr[10] == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen never showed 21 accepted, 20 delivered, 1 undeliverable:\n%s", strings.Join(frame, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	text := strings.Join(frame, "\n")
	if !strings.Contains(text, "no_sink") || !strings.Contains(text, "422") || !strings.Contains(text, "no schema for bad") {
		t.Errorf("the dead letter's outcome, code and reason are not on screen:\n%s", text)
	}
	for _, l := range frame {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("line of %d columns on a 100-column terminal: %q", n, l)
		}
	}
	// It redraws every second: the clock in the header moves.
	deadline = time.Now().Add(5 * time.Second)
	for {
		f := lastFrame(screen.String())
		if len(f) > 0 && f[0] != first && strings.HasPrefix(f[0], "sluice top") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top did not redraw: header still %q", first)
		}
		time.Sleep(100 * time.Millisecond)
	}

	stopTop()
	select {
	case code := <-topped:
		if code != 0 {
			t.Errorf("top exited %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("top did not stop")
	}
	tty.Close()
	<-copied
	if s := screen.String(); !strings.HasPrefix(s, altScreenOn) || !strings.HasSuffix(s, altScreenOff) {
		t.Errorf("top did not enter and leave the alternate screen: starts %q, ends %q", s[:min(len(s), 20)], s[max(0, len(s)-20):])
	}
}

// TestTopOnce prints one frame to a plain writer (no terminal): no control sequence.
func TestTopOnce(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ui/snapshot.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"time":"2026-01-02T03:04:05Z","rate_s":5,"latency_window_s":60,"brokers":[{"name":"a/b","accepted_total":7,"ingress_rate":1.5}],`+
			`"triggers":[{"name":"a/t","broker":"a/b","delivered_total":6,"p50_ms":2.5,"p99_ms":120}],"dead_letters":[],"dead_letters_seen":0}`)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	var out, errOut lockedBuffer
	if code := Execute(context.Background(), []string{"top", "--addr", ln.Addr().String(), "--once"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	s := out.String()
	if strings.Contains(s, "\x1b") {
		t.Errorf("control sequences in --once output: %q", s)
	}
	b, tr := row(strings.Split(s, "\n"), "a/b"), row(strings.Split(s, "\n"), "a/t")
	if len(b) < 5 || b[1] != "1.50" || b[3] != "7" {
		t.Errorf("broker row %q", b)
	}
	if len(tr) != 11 || tr[6] != "2.5ms" || tr[7] != "120ms" || tr[8] != "6" {
		t.Errorf("trigger row %q", tr)
	}
	if code := Execute(context.Background(), []string{"top", "--addr", "127.0.0.1:1", "--once"}, &out, &errOut); code == 0 {
		t.Error("top --once against nothing exited 0")
	}
}
