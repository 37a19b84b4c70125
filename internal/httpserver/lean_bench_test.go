package httpserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkServe is why the lean path exists: one keep-alive connection posting 2 KiB
// binary-mode events, answered 202 by a handler that reads the body, with the lean path
// (building a request per request, or reusing a pooled one: WithRequestReuse) and
// without it. ns/op and allocs/op are the round trip's, client included; compare them
// from one run (go test -bench Serve -benchmem ./internal/httpserver/).
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	})
	body := strings.Repeat("x", 2048)
	req := fmt.Sprintf("POST /ns/broker HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\n"+
		"Content-Type: application/json\r\nCe-Specversion: 1.0\r\nCe-Id: 1\r\nCe-Source: bench\r\n"+
		"Ce-Type: bench.event\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for _, tc := range []struct {
		name        string
		lean, reuse bool
	}{{"lean/reuse", true, true}, {"lean", true, false}, {"net/http", false, false}} {
		b.Run(tc.name, func(b *testing.B) {
			s := start(b, h, WithLeanHTTP1(tc.lean), WithRequestReuse(tc.reuse))
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			b.SetBytes(int64(len(req)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := io.WriteString(c, req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
