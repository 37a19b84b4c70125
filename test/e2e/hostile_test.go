package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHostileClientBounds runs sluice serve with a cap of five connections and a 1 MiB
// body budget: five idle keep-alive connections do not keep /healthz out (the longest
// idle is closed for it), a request smuggled with both Content-Length and
// Transfer-Encoding is refused and its connection closed, and a Content-Length over the
// body budget is answered 413 before its body is sent.
func TestHostileClientBounds(t *testing.T) {
	b := startBroker(t, "--max-conns", "5", "--max-inflight-body-bytes", "1MiB", "--max-event-bytes", "1MiB")
	addr := strings.TrimPrefix(b.base, "http://")
	raw := func(req string) (*http.Response, *bufio.Reader, net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second)) // bounds a hang only
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, br, c
	}

	for i := range 5 {
		if resp, _, _ := raw("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("keep-alive connection %d: %d", i, resp.StatusCode)
		}
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(b.base + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz with every slot held by an idle connection: %v %v", resp, err)
	}
	resp.Body.Close()
	c.CloseIdleConnections()

	hidden := "POST /default/default HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nce-specversion: 1.0\r\nce-id: smuggled\r\nce-source: /x\r\nce-type: t\r\n\r\n{}"
	resp, br, _ := raw(fmt.Sprintf("POST /default/default HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n"+
		"ce-specversion: 1.0\r\nce-id: outer\r\nce-source: /x\r\nce-type: t\r\n\r\n0\r\n\r\n%s", len("0\r\n\r\n"+hidden), hidden))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "both Content-Length and Transfer-Encoding") {
		t.Errorf("smuggling: %d %q; want 400 naming both fields", resp.StatusCode, body)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Errorf("after the 400: %q, %v; want the connection closed", rest, err)
	}

	// A body announced and not sent holds its bytes in the budget, and /metrics shows them.
	if got := b.metric("sluice_inflight_body_limit_bytes"); got != 1<<20 {
		t.Errorf("sluice_inflight_body_limit_bytes %v, want %d", got, 1<<20)
	}
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stalled, "POST /default/default HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nce-specversion: 1.0\r\nce-id: slow\r\nce-source: /x\r\nce-type: t\r\n\r\n")
	for deadline := time.Now().Add(30 * time.Second); b.metric("sluice_inflight_body_bytes") < 1000; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_inflight_body_bytes %v with a 1000-byte body announced", b.metric("sluice_inflight_body_bytes"))
		}
	}
	stalled.Close()
	for deadline := time.Now().Add(30 * time.Second); b.metric("sluice_inflight_body_bytes") != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sluice_inflight_body_bytes %v after the stalled client left", b.metric("sluice_inflight_body_bytes"))
		}
	}
	if got := b.metric("sluice_inflight_body_peak_bytes"); got < 1000 {
		t.Errorf("sluice_inflight_body_peak_bytes %v, want ≥ 1000", got)
	}

	resp, _, _ = raw(fmt.Sprintf("POST /default/default HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20+1))
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(body), "--max-inflight-body-bytes") {
		t.Errorf("Content-Length over the body budget: %d %q; want 413 naming --max-inflight-body-bytes", resp.StatusCode, body)
	}
}
