package httpserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/sluice-broker/sluice/internal/httpascii"
)

// Request smuggling (RFC 9112 section 6.1). A request with both Content-Length and
// Transfer-Encoding is framed one way by a proxy that reads the first and another by a
// server that reads the second: the bytes one of them takes for a body the other takes
// for a second request. net/http serves such a request as chunked, drops its
// Content-Length header (so a handler cannot see it was there) and keeps the connection
// open. So each plain connection net/http serves — every one without the lean path, and
// those the lean path hands over, from the first byte of the request it did not take —
// is a frameConn: it follows the framing of the requests read through it (heads,
// Content-Length bodies, chunks and trailers), and once a head carries both fields,
// every request served on the connection from then on is answered 400 and the
// connection closed (guard, budget.go), so the request hidden in the body is never
// served. The lean path takes no request with a Transfer-Encoding: it hands it over.

// maxFrameLine bounds the bytes of one line a framer keeps: a longer head line is over
// the header limit net/http answers 431, and a longer chunk-size line is refused by
// net/http too.
const maxFrameLine = 64 << 10

// frameConn is a plain connection net/http serves, with the framing of its requests
// followed (framer).
type frameConn struct {
	net.Conn
	tls    *tls.ConnectionState // over TLS (tlsserve.go): its handshake's; nil: plain
	f      framer               // used by the goroutine reading the connection only
	badAt  atomic.Int64         // the number of the first head with both fields (from 1); 0: none
	served atomic.Int64         // requests guard was given
}

func (c *frameConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.f.done {
		c.f.feed(p[:n])
		if c.f.bad {
			c.badAt.Store(int64(c.f.heads))
		}
	}
	return n, err
}

// CloseWrite lets net/http half-close before closing, as for the connection inside.
func (c *frameConn) CloseWrite() error { return closeWrite(c.Conn) }

// NetConn is the connection inside (slotOf).
func (c *frameConn) NetConn() net.Conn { return c.Conn }

// frameListener gives net/http its connections as frameConns.
type frameListener struct{ net.Listener }

func (l frameListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &frameConn{Conn: c}, nil
}

type frameConnKey struct{}

// connContext is net/http's ConnContext: a frameConn's requests carry it.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*frameConn); ok {
		return context.WithValue(ctx, frameConnKey{}, fc)
	}
	return ctx
}

// smuggled reports whether r carried both Content-Length and Transfer-Encoding, or came
// after one that did on its connection; called once for each request guard is given.
// Requests pipelined before it are served: the heads net/http serves without a handler
// ("OPTIONS *") are not counted. A request over TLS on a frameConn is given its
// connection's TLS state, which net/http cannot see.
func smuggled(r *http.Request) bool {
	fc, _ := r.Context().Value(frameConnKey{}).(*frameConn)
	if fc == nil {
		return false
	}
	if r.TLS == nil {
		r.TLS = fc.tls
	}
	n := fc.served.Add(1)
	bad := fc.badAt.Load()
	return bad != 0 && n >= bad
}

// framer states.
const (
	frHead      = iota // in a request head
	frBody             // in a Content-Length body: left bytes to skip
	frChunkSize        // in a chunk-size line
	frChunkData        // in a chunk's data: left bytes to skip
	frChunkEnd         // in the line ending a chunk's data
	frTrailer          // in the trailer section after the last chunk
)

// framer follows the framing of HTTP/1.x requests fed to it in pieces, as net/http
// reads them. It stops (done) at the first head with both Content-Length and
// Transfer-Encoding (bad), and at bytes it cannot frame: net/http refuses those and
// closes the connection.
type framer struct {
	state     int
	left      int64  // bytes of body or chunk data to skip
	line      []byte // the partial line (without its LF) not yet complete
	field     []byte // the head's header field being read, folded lines joined; empty: none
	first     bool   // the head's request line has been read
	http10    bool   // the request is HTTP/1.0 (its Transfer-Encoding is ignored)
	cl        []byte // the head's first Content-Length value; nil: none
	te        int    // Transfer-Encoding fields in the head
	chunked   bool   // its one Transfer-Encoding is chunked
	heads     int    // complete heads read, but for "OPTIONS *" (net/http answers those)
	options   bool   // the head's request is "OPTIONS *"
	bad, done bool
}

// feed follows b, the next bytes read.
func (f *framer) feed(b []byte) {
	for len(b) > 0 && !f.done {
		switch f.state {
		case frBody, frChunkData:
			k := min(int64(len(b)), f.left)
			b, f.left = b[k:], f.left-k
			if f.left == 0 {
				if f.state == frBody {
					f.state = frHead
				} else {
					f.state = frChunkEnd
				}
			}
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f.keep(b)
			return
		}
		var line []byte
		if len(f.line) > 0 {
			f.keep(b[:i])
			line = f.line
		} else {
			line = b[:i]
		}
		b = b[i+1:]
		if !f.done {
			f.endLine(bytes.TrimSuffix(line, []byte{'\r'}))
		}
		f.line = f.line[:0]
	}
}

// keep adds b to the partial line, and gives up past maxFrameLine.
func (f *framer) keep(b []byte) {
	if len(f.line)+len(b) > maxFrameLine {
		f.done = true
		return
	}
	f.line = append(f.line, b...)
}

// endLine takes one complete line, without its CRLF or LF.
func (f *framer) endLine(line []byte) {
	switch f.state {
	case frHead:
		f.headLine(line)
	case frChunkSize:
		size, ok := chunkSize(line)
		switch {
		case !ok:
			f.done = true
		case size == 0:
			f.state = frTrailer
		default:
			f.state, f.left = frChunkData, size
		}
	case frChunkEnd:
		if len(line) > 0 {
			f.done = true
			return
		}
		f.state = frChunkSize
	case frTrailer:
		if len(line) == 0 {
			f.state = frHead
		}
	}
}

// headLine takes a line of a request head.
func (f *framer) headLine(line []byte) {
	if !f.first {
		if len(line) == 0 {
			f.done = true // net/http refuses an empty request line
			return
		}
		f.first, f.http10 = true, bytes.HasSuffix(line, []byte(" HTTP/1.0"))
		f.options = bytes.HasPrefix(line, []byte("OPTIONS * "))
		f.cl, f.te, f.chunked = nil, 0, false
		return
	}
	if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		// An obsolete line folding, which net/http still takes: the line continues the
		// field before it, joined by a space.
		if len(f.field) == 0 || len(f.field)+len(line) > maxFrameLine {
			f.done = true // net/http refuses a head whose first field is folded
			return
		}
		f.field = append(append(f.field, ' '), bytes.Trim(line, " \t")...)
		return
	}
	if len(f.field) > 0 {
		f.header(f.field)
		f.field = f.field[:0]
		if f.done {
			return
		}
	}
	if len(line) > 0 {
		f.field = append(f.field, line...)
		return
	}
	// The end of the head.
	if !f.options {
		f.heads++
	}
	f.first = false
	if f.te > 0 && f.cl != nil {
		f.bad, f.done = true, true
		return
	}
	if f.te > 0 && !f.http10 {
		if f.te != 1 || !f.chunked {
			f.done = true // net/http answers 501 and closes
			return
		}
		f.state = frChunkSize
		return
	}
	if f.cl == nil {
		return // no body
	}
	n := parseLength(f.cl)
	if n < 0 {
		f.done = true // net/http refuses it
		return
	}
	if n > 0 {
		f.state, f.left = frBody, n
	}
}

// header takes one header field of a head, its folded lines joined.
func (f *framer) header(line []byte) {
	name, value, ok := bytes.Cut(line, []byte{':'})
	if !ok {
		f.done = true
		return
	}
	value = bytes.Trim(value, " \t")
	switch {
	case httpascii.EqualFold(name, "Content-Length"):
		switch {
		case f.cl == nil:
			f.cl = append([]byte{}, value...)
		case !bytes.Equal(f.cl, value):
			f.done = true // net/http refuses differing lengths
		}
	case httpascii.EqualFold(name, "Transfer-Encoding"):
		f.te++
		f.chunked = httpascii.EqualFold(value, "chunked")
	}
}

// chunkSize parses a chunk-size line: hex digits, then optional extensions after ';'.
func chunkSize(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 16 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, n >= 0
}
