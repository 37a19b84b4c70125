package httpserver

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestIdleConnectionReclaimed holds every slot with an idle keep-alive connection: a
// new client's request is still answered, the longest-idle connection having been
// closed to make room, and the others still serve.
func TestIdleConnectionReclaimed(t *testing.T) {
	const slots = 5
	for _, tt := range []struct {
		name, method string
		lean         bool
	}{
		{"lean path", "POST", true},
		{"handed to net/http", "GET", true},
		{"net/http", "POST", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				_, _ = io.WriteString(w, "ok\n")
			}), WithMaxConns(slots), WithLeanHTTP1(tt.lean))
			req := tt.method + " /x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
			if tt.method == "GET" {
				req = "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"
			}
			ask := func(c net.Conn, br *bufio.Reader) error {
				if _, err := io.WriteString(c, req); err != nil {
					return err
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				return err
			}
			conns := make([]net.Conn, slots)
			brs := make([]*bufio.Reader, slots)
			for i := range conns {
				c, err := net.Dial("tcp", s.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				conns[i], brs[i] = c, bufio.NewReader(c)
				if err := ask(c, brs[i]); err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				// The next is idle later than this one.
				waitFor(t, "the connection idle", func() bool { return idleConns(s) == i+1 })
			}
			c := &http.Client{Timeout: 30 * time.Second} // bounds a hang only
			resp, err := c.Get("http://" + s.Addr().String() + "/healthz")
			if err != nil {
				t.Fatalf("with every slot held by an idle connection: %v", err)
			}
			resp.Body.Close()
			c.CloseIdleConnections()
			if got := s.ln.reclaimed.Load(); got != 1 {
				t.Errorf("%d connections reclaimed, want 1", got)
			}
			if _, err := brs[0].ReadByte(); err != io.EOF {
				t.Errorf("the longest-idle connection: read %v, want EOF (closed)", err)
			}
			for i := 1; i < slots; i++ {
				if err := ask(conns[i], brs[i]); err != nil {
					t.Errorf("connection %d after the reclaim: %v", i, err)
				}
			}
		})
	}
}

// idleConns counts the connections marked idle.
func idleConns(s *Server) int {
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	n := 0
	for c := range s.ln.conns {
		if c.idleSince.Load() > 0 {
			n++
		}
	}
	return n
}
