package delivery

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestH1ConnSend sends requests with h1Conn.send to a raw server and reads the answers:
// a request the socket takes whole is written raw and its answer waited for; one it takes
// only in part is finished the usual way; a wait for an answer that never comes ends at
// the read deadline.
func TestH1ConnSend(t *testing.T) {
	for _, tt := range []struct {
		name      string
		body      int           // request body bytes
		readAfter time.Duration // the server starts reading after this
		answer    bool          // the server answers
		answerIn  time.Duration // after reading the request
		wantRaw   bool          // the whole request went in the raw write
	}{
		{name: "small request: written raw, answer awaited", body: 2048, answer: true, answerIn: 100 * time.Millisecond, wantRaw: true},
		{name: "large request: the rest written the usual way", body: 32 << 20, readAfter: 200 * time.Millisecond, answer: true},
		{name: "no answer: the wait ends at the deadline", body: 2048, wantRaw: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got, done := make(chan int, 1), make(chan struct{})
			defer close(done)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				time.Sleep(tt.readAfter)
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					got <- -1
					return
				}
				n, _ := io.Copy(io.Discard, req.Body)
				got <- int(n)
				if tt.answer {
					time.Sleep(tt.answerIn)
					io.WriteString(c, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
				}
				<-done // hold the connection open until the test ends
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			pc := newH1Conn(c, ln.Addr().String())
			defer pc.close()
			if pc.rc == nil {
				t.Fatal("a TCP connection without its raw connection")
			}
			req := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(tt.body) + "\r\n\r\n"
			buf := append([]byte(req), bytes.Repeat([]byte("x"), tt.body)...)
			pc.c.SetDeadline(time.Now().Add(1500 * time.Millisecond))
			start := time.Now()
			err = pc.send(buf)
			if raw := pc.waited && pc.sent == len(buf); raw != tt.wantRaw {
				t.Errorf("raw write and wait: %v (sent %d of %d), want %v", raw, pc.sent, len(buf), tt.wantRaw)
			}
			if !tt.answer {
				if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < time.Second {
					t.Fatalf("send without an answer: %v after %v, want the deadline's error after 1.5s", err, time.Since(start))
				}
				return
			}
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			if took := time.Since(start); tt.wantRaw && took < tt.answerIn {
				t.Errorf("send returned after %v, before the answer (sent after %v)", took, tt.answerIn)
			}
			resp, err := http.ReadResponse(pc.br, nil)
			if err != nil || resp.StatusCode != http.StatusAccepted {
				t.Fatalf("answer: %v %v", resp, err)
			}
			if n := <-got; n != tt.body {
				t.Errorf("the server read %d body bytes, want %d", n, tt.body)
			}
		})
	}
}
