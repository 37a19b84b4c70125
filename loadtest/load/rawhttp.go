package load

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// rawConn is a keep-alive HTTP/1.1 client connection owned by one worker. It writes a
// request the worker assembled in one buffer (one write system call) and parses only
// what it needs of the response: status code, Content-Length or chunked framing, and
// Connection: close. It is what makes the generator cheap enough to measure a fast
// target on the same cores; https targets use net/http instead (stdSender).
//
// The broker's delivery transport (package delivery/h1) is the other hand-written
// HTTP/1.1 client in the repo, on purpose: it must build requests from *http.Request and
// return a full *http.Response (Retry-After, a reply's headers and body), while this one
// sends bytes assembled once per worker and never looks at a header it does not need.
// Sharing one parser would make the generator pay for what only delivery uses.
type rawConn struct {
	addr    string
	timeout time.Duration
	dialer  net.Dialer
	c       net.Conn
	br      *bufio.Reader
	used    bool // the connection already carried a request (so a stale close may retry)

	mu      sync.Mutex // guards c's assignment against abort, and aborted
	aborted bool
}

// abort makes the send in progress fail at once and later ones fail immediately. It is
// the only method that may be called from another goroutine.
func (rc *rawConn) abort() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.aborted = true
	if rc.c != nil {
		_ = rc.c.SetDeadline(time.Now())
	}
}

// errMalformed reports a response the parser does not understand.
var errMalformed = errors.New("malformed HTTP response")

func (rc *rawConn) close() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.c != nil {
		_ = rc.c.Close()
		rc.c = nil
	}
}

// roundTrip sends req (a complete HTTP/1.1 request) and returns the response status and
// the number of response bytes read (status line, headers and body).
func (rc *rawConn) roundTrip(req []byte) (int, int64, error) {
	for attempt := 0; ; attempt++ {
		reused := rc.c != nil && rc.used
		if rc.aborted0() {
			return 0, 0, errAborted
		}
		status, in, err := rc.try(req)
		if err == nil {
			return status, in, nil
		}
		rc.close()
		// A keep-alive connection the server closed while idle fails before any byte
		// of response: retry once on a fresh connection, as net/http does.
		if reused && in == 0 && attempt == 0 && isStale(err) {
			continue
		}
		return 0, in, err
	}
}

func (rc *rawConn) aborted0() bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.aborted
}

func isStale(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

func (rc *rawConn) try(req []byte) (int, int64, error) {
	if err := rc.dial(); err != nil {
		return 0, 0, err
	}
	if rc.timeout > 0 {
		_ = rc.c.SetDeadline(time.Now().Add(rc.timeout))
	}
	rc.used = true
	if _, err := rc.c.Write(req); err != nil {
		return 0, 0, fmt.Errorf("write request: %w", err)
	}
	return rc.readResponse()
}

// dial opens the connection if there is none.
func (rc *rawConn) dial() error {
	if rc.c != nil {
		return nil
	}
	c, err := rc.dialer.Dial("tcp", rc.addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", rc.addr, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	rc.mu.Lock()
	if rc.aborted {
		rc.mu.Unlock()
		_ = c.Close()
		return errAborted
	}
	rc.c, rc.used = c, false
	rc.mu.Unlock()
	if rc.br == nil {
		rc.br = bufio.NewReaderSize(c, 16<<10)
	} else {
		rc.br.Reset(c)
	}
	return nil
}

var (
	hdrContentLength    = []byte("content-length")
	hdrTransferEncoding = []byte("transfer-encoding")
	hdrConnection       = []byte("connection")
)

// readResponse parses one response and discards its body, leaving the reader at the
// start of the next response.
func (rc *rawConn) readResponse() (int, int64, error) {
	var in int64
	for {
		line, err := rc.br.ReadSlice('\n')
		in += int64(len(line))
		if err != nil {
			return 0, in, fmt.Errorf("read status line: %w", err)
		}
		// "HTTP/1.1 202 Accepted\r\n"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
			return 0, in, errMalformed
		}
		status, err := strconv.Atoi(string(line[9:12]))
		if err != nil {
			return 0, in, errMalformed
		}
		length, chunked, closeConn := int64(-1), false, line[7] == '0'
		for {
			h, err := rc.br.ReadSlice('\n')
			in += int64(len(h))
			if err != nil {
				return 0, in, fmt.Errorf("read headers: %w", err)
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return 0, in, errMalformed
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, hdrContentLength):
				if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
					return 0, in, errMalformed
				}
			case bytes.EqualFold(name, hdrTransferEncoding):
				chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
			case bytes.EqualFold(name, hdrConnection):
				closeConn = closeConn || bytes.EqualFold(value, []byte("close"))
			}
		}
		if status >= 100 && status < 200 {
			continue // interim response; the real one follows
		}
		n, err := rc.discardBody(status, length, chunked)
		in += n
		if err != nil {
			return 0, in, err
		}
		if closeConn || (length < 0 && !chunked && status != 204 && status != 304) {
			rc.close()
		}
		return status, in, nil
	}
}

func (rc *rawConn) discardBody(status int, length int64, chunked bool) (int64, error) {
	switch {
	case status == 204 || status == 304:
		return 0, nil
	case chunked:
		var in int64
		for {
			line, err := rc.br.ReadSlice('\n')
			in += int64(len(line))
			if err != nil {
				return in, fmt.Errorf("read chunk size: %w", err)
			}
			sz := bytes.TrimSpace(line)
			if i := bytes.IndexByte(sz, ';'); i >= 0 {
				sz = sz[:i]
			}
			size, err := strconv.ParseInt(string(sz), 16, 64)
			if err != nil || size < 0 {
				return in, errMalformed
			}
			if size == 0 {
				for { // trailers, up to the empty line
					t, err := rc.br.ReadSlice('\n')
					in += int64(len(t))
					if err != nil {
						return in, fmt.Errorf("read trailer: %w", err)
					}
					if len(bytes.TrimSpace(t)) == 0 {
						return in, nil
					}
				}
			}
			d, err := rc.br.Discard(int(size) + 2)
			in += int64(d)
			if err != nil {
				return in, fmt.Errorf("read chunk: %w", err)
			}
		}
	case length >= 0:
		d, err := rc.br.Discard(int(length))
		if err != nil {
			return int64(d), fmt.Errorf("read body: %w", err)
		}
		return int64(d), nil
	default: // body runs to the end of the connection
		n, err := io.Copy(io.Discard, rc.br)
		return n, err
	}
}
