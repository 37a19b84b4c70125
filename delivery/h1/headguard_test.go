package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// manyFields is a response head with n header fields in all, Content-Length included.
func manyFields(n int) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "X-F%d: 1\r\n", i)
	}
	b.WriteString("\r\n")
	return b.String()
}

// TestHeadGuardReads: the guard never hands on more than MaxResponseHeaderBytes of head,
// whatever the sizes of the reads, and lets a body through unbounded once the head ended.
func TestHeadGuardReads(t *testing.T) {
	body := strings.Repeat("b", 3*MaxResponseHeaderBytes)
	for _, size := range []int{1, 7, 4096, 1 << 20} {
		ok := "HTTP/1.1 200 OK\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
		g := headGuard{r: strings.NewReader(ok)}
		g.arm()
		br := bufio.NewReaderSize(&g, size)
		resp, err := readFinalResponse(br, nil, nil)
		if err != nil {
			t.Fatalf("read size %d: %v", size, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || len(got) != len(body) {
			t.Errorf("read size %d: body of %d bytes, %v; want %d", size, len(got), err, len(body))
		}

		src := &countingReader{r: strings.NewReader("HTTP/1.1 200 OK\r\nX: " + body)}
		g = headGuard{r: src}
		g.arm()
		_, err = readFinalResponse(bufio.NewReaderSize(&g, size), nil, nil)
		if !errors.Is(err, ErrResponseHeadTooLarge) {
			t.Errorf("read size %d: err %v, want ErrResponseHeadTooLarge", size, err)
		}
		if src.n > MaxResponseHeaderBytes {
			t.Errorf("read size %d: %d bytes read from the connection; want at most %d", size, src.n, MaxResponseHeaderBytes)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzResponseHead: through the head guard, a response either reads as net/http reads
// it unguarded (same status, headers and leftover), or fails with
// ErrResponseHeadTooLarge after at most MaxResponseHeaderBytes bytes, and then only for
// a response net/http fails on too or whose heads do pass a bound.
func FuzzResponseHead(f *testing.F) {
	for _, s := range leanResponseSeeds {
		f.Add([]byte(s), uint16(16))
	}
	f.Add([]byte(manyFields(MaxResponseHeaderFields+1)), uint16(4096))
	f.Add([]byte("HTTP/1.1 103 Early Hints\r\nLink: a\r\n\r\n"+manyFields(MaxResponseHeaderFields)), uint16(64))
	f.Fuzz(func(t *testing.T, in []byte, size uint16) {
		size = max(size, 16)
		plain, perr := readFinalResponse(bufio.NewReaderSize(bytes.NewReader(in), int(size)), nil, nil)
		src := &countingReader{r: bytes.NewReader(in)}
		g := headGuard{r: src}
		g.arm()
		br := bufio.NewReaderSize(&g, int(size))
		guarded, gerr := readGuardedResponse(br, &g, nil)
		g.disarm()
		switch {
		case gerr == nil:
			if perr != nil {
				t.Fatalf("guarded read %d, unguarded failed: %v", guarded.StatusCode, perr)
			}
			if guarded.StatusCode != plain.StatusCode || fmt.Sprint(guarded.Header) != fmt.Sprint(plain.Header) {
				t.Fatalf("guarded %d %v, unguarded %d %v", guarded.StatusCode, guarded.Header, plain.StatusCode, plain.Header)
			}
		case errors.Is(gerr, ErrResponseHeadTooLarge):
			if src.n > MaxResponseHeaderBytes {
				t.Fatalf("%d bytes read before failing; want at most %d", src.n, MaxResponseHeaderBytes)
			}
			if perr == nil && len(in) <= MaxResponseHeaderBytes && bytes.Count(in, []byte("\n")) <= MaxResponseHeaderFields {
				t.Fatalf("refused a head within the bounds: %v", gerr)
			}
		default:
			if perr == nil {
				t.Fatalf("guarded failed (%v), unguarded read %d", gerr, plain.StatusCode)
			}
		}
	})
}
