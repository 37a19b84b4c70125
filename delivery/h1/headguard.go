package h1

import (
	"errors"
	"fmt"
	"io"
)

// Bounds on a response head (status line and header fields, informational responses
// included). net/http reads a header line of any length and any number of fields: a
// server answering with an endless header line would make the client buffer it all. A
// response over either bound fails the round trip with ErrResponseHeadTooLarge, whose
// text names the bound.
const (
	// MaxResponseHeaderBytes bounds the bytes of a response head: 64 KiB.
	MaxResponseHeaderBytes = 64 << 10
	// MaxResponseHeaderFields bounds the header fields of a response head.
	MaxResponseHeaderFields = 512
)

// ErrResponseHeadTooLarge is the error of a round trip whose response head passed
// MaxResponseHeaderBytes or MaxResponseHeaderFields.
var ErrResponseHeadTooLarge = errors.New("the subscriber's response head is too large")

// headGuard sits between a connection and its bufio.Reader. While armed (a response head
// is being read) it passes at most maxBytes bytes in all and counts the head's lines as
// they go by, failing the read that would pass either bound; once it has passed the empty
// line that ends the head, the body flows through unguarded (its readers bound it).
// net/http's parser then sees an error instead of an endless line.
type headGuard struct {
	r     io.Reader
	armed bool
	left  int  // bytes the heads may still take
	lines int  // lines of heads seen, status lines included
	line  int  // bytes of the current line so far, its '\n' excluded
	cr    bool // the current line so far is one "\r"
	err   error
}

// arm starts guarding a new exchange: nothing of it is buffered yet.
func (g *headGuard) arm() {
	g.armed, g.left, g.lines, g.line, g.cr, g.err = true, MaxResponseHeaderBytes, 0, 0, false, nil
}

// rearm guards the next head after an informational response, whose bytes already
// read (buf, the reader's buffer) are scanned first; the bytes they took stay counted.
func (g *headGuard) rearm(buf []byte) error {
	g.armed, g.line, g.cr = true, 0, false
	g.scan(buf)
	return g.err
}

// disarm stops guarding: the head was read.
func (g *headGuard) disarm() { g.armed = false }

func (g *headGuard) Read(p []byte) (int, error) {
	if !g.armed {
		return g.r.Read(p)
	}
	if g.err != nil {
		return 0, g.err
	}
	if g.left <= 0 {
		g.err = fmt.Errorf("%w: more than %d bytes (MaxResponseHeaderBytes)", ErrResponseHeadTooLarge, MaxResponseHeaderBytes)
		return 0, g.err
	}
	if len(p) > g.left {
		p = p[:g.left]
	}
	n, err := g.r.Read(p)
	g.left -= n
	if k := g.scan(p[:n]); k < n {
		return k, g.err // the bytes past the bound are not handed on
	}
	return n, err
}

// scan follows b through the head: it counts lines, disarms at the empty line that ends
// the head, and sets g.err once there are more than MaxResponseHeaderFields fields. It
// returns how many bytes of b it let through.
func (g *headGuard) scan(b []byte) int {
	for i, c := range b {
		if !g.armed {
			return len(b)
		}
		if c != '\n' {
			g.cr = g.line == 0 && c == '\r'
			g.line++
			continue
		}
		if g.line == 0 || (g.line == 1 && g.cr) { // the empty line: the head ends
			g.armed = false
			continue
		}
		g.line, g.cr = 0, false
		if g.lines++; g.lines > MaxResponseHeaderFields+1 { // the status line and the fields
			g.err = fmt.Errorf("%w: more than %d header fields (MaxResponseHeaderFields)", ErrResponseHeadTooLarge, MaxResponseHeaderFields)
			return i
		}
	}
	return len(b)
}
