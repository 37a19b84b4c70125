package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// leanSeedsTaken is how many of leanResponseSeeds, from the first, the lean reader takes.
const leanSeedsTaken = 3

// leanResponseSeeds are responses for the lean reader: the first leanSeedsTaken it takes,
// the others it leaves to net/http.
var leanResponseSeeds = []string{
	"HTTP/1.1 202 Accepted\r\nDate: Tue, 24 Nov 2026 04:00:00 GMT\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\ncontent-length:0\r\nConnection: close\r\nServer: x\r\n\r\nHTTP/1.1 202 Accepted\r\n",
	"HTTP/1.1 204\r\nContent-Length: 0\r\nCONNECTION: Keep-Alive\r\n\r\n",
	"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 202 Accepted\r\nContent-Length: 00\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: application/cloudevents+json\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nCe-Id: 1\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nDate: a\r\n b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\u017ferver: x\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
}

// FuzzLeanResponse: a response the lean reader takes is one net/http reads the same way
// — the same status, length, keep-alive and (no) body — and leaves the same bytes unread
// after it; one it does not take it leaves unread.
func FuzzLeanResponse(f *testing.F) {
	for _, s := range leanResponseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
		if _, err := br.Peek(1); err != nil {
			return
		}
		buffered := br.Buffered()
		got := leanResponse(br)
		if got == nil {
			if br.Buffered() != buffered {
				t.Fatalf("%q: not taken, yet %d bytes consumed", raw, buffered-br.Buffered())
			}
			return
		}
		wantBR := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
		want, err := http.ReadResponse(wantBR, nil)
		if err != nil {
			t.Fatalf("lean reader took %q; net/http refuses it: %v", raw, err)
		}
		body, err := io.ReadAll(want.Body)
		if err != nil || len(body) > 0 {
			t.Fatalf("%q: net/http reads a body %q (%v)", raw, body, err)
		}
		for k := range want.Header {
			if k != "Date" && k != "Server" && k != "Connection" && k != "Content-Length" {
				t.Fatalf("%q: the lean reader dropped header %s", raw, k)
			}
		}
		rest, _ := io.ReadAll(br)
		wantRest, _ := io.ReadAll(wantBR)
		switch {
		case got.StatusCode != want.StatusCode, got.ContentLength != want.ContentLength,
			got.Close != want.Close, got.Proto != want.Proto, got.Status != want.Status:
			t.Fatalf("%q: lean %q %d len %d close %v; net/http %q %d len %d close %v", raw,
				got.Status, got.StatusCode, got.ContentLength, got.Close,
				want.Status, want.StatusCode, want.ContentLength, want.Close)
		case !bytes.Equal(rest, wantRest):
			t.Fatalf("%q: lean leaves %q unread, net/http %q", raw, rest, wantRest)
		}
	})
}

// TestLeanResponseTakes: the shapes the lean reader is for are taken, the others left.
func TestLeanResponseTakes(t *testing.T) {
	for i, s := range leanResponseSeeds {
		br := bufio.NewReader(bytes.NewReader([]byte(s)))
		br.Peek(1)
		got := leanResponse(br) != nil
		if want := i < leanSeedsTaken; got != want {
			t.Errorf("%q: taken %v, want %v", s, got, want)
		}
	}
}
