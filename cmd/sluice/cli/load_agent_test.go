package cli

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLoadAgentStopsItsServer: when its context ends, `sluice load --agent` returns
// only once its server has stopped: a request still under way (its body never comes)
// has had its connection closed by then.
func TestLoadAgentStopsItsServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Execute(ctx, []string{"load", "--agent", "--listen", "127.0.0.1:0"}, &lockedBuffer{}, &stderr)
	}()
	re := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the agent printed no address in 20s: %q", stderr.String())
		}
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second)) // bounds a hang only
	// A run whose body never comes: the server answers 100 Continue once its handler
	// reads the body, so the request is under way when the context ends.
	if _, err := conn.Write([]byte("POST /run HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 1000\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("no 100 Continue: %q, %v", line, err)
	}
	br.ReadString('\n') // the blank line after it
	cancel()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not return in 30s after its context ended")
	}
	// The connection is closed already: the read ends at once, not at the deadline.
	_, err = br.ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the agent returned with a request's connection still open")
	}
}
