package httpserver

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-broker/sluice/internal/httpascii"
)

// leanResponse is the http.ResponseWriter of the lean path. It writes what net/http's
// writer writes for the same handler calls: the status line, the handler's header, a
// Date, a Content-Length when the handler did not stream (else chunked encoding), and a
// sniffed Content-Type for a body without one. The response is sent when the handler
// returns, or at Flush.
type leanResponse struct {
	c       *leanConn
	header  http.Header
	status  int
	out     []byte // what is not sent yet: the body so far until the head is sent, then head and body
	sent    bool   // the head went out (Flush): the rest is chunked or Content-Length bound
	chunked bool
	close   bool // the handler asked for Connection: close
	err     error
}

func (w *leanResponse) reset(c *leanConn) {
	clear(w.header)
	w.c, w.status, w.out, w.sent, w.chunked, w.close, w.err = c, 0, w.out[:0], false, false, false, nil
}

// Header is the header the response will send.
func (w *leanResponse) Header() http.Header { return w.header }

// WriteHeader sets the status; only the first call counts, as with net/http. An
// informational status (1xx) is not sent: the lean path has no interim responses.
func (w *leanResponse) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
}

// Write appends to the body, answering 200 if no status was set.
func (w *leanResponse) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.sent && w.chunked {
		w.out = appendChunk(w.out, p)
		return len(p), w.bound()
	}
	w.out = append(w.out, p...)
	return len(p), w.bound()
}

// leanFlushAt bounds what a response holds unsent: beyond it the response is flushed
// (chunked without a Content-Length), as net/http's writer does past its buffer.
const leanFlushAt = 64 << 10

// bound flushes the response once it holds more than leanFlushAt unsent bytes.
func (w *leanResponse) bound() error {
	if len(w.out) <= leanFlushAt {
		return nil
	}
	return w.FlushError()
}

// Flush sends the head and the body so far.
func (w *leanResponse) Flush() { _ = w.FlushError() }

// FlushError is Flush, reporting a failed send (http.ResponseController uses it).
func (w *leanResponse) FlushError() error {
	if w.err == nil && !w.sent {
		w.sendHead(false)
	}
	return w.send()
}

// finish completes the response after the handler returned and sends it.
func (w *leanResponse) finish() error {
	switch {
	case w.err != nil:
	case !w.sent:
		w.sendHead(true)
	case w.chunked:
		w.out = append(w.out, "0\r\n\r\n"...)
	}
	return w.send()
}

// sendHead puts the head before the body so far in out. With complete, the body is
// whole: it gets a Content-Length; else, without one from the handler, chunked encoding.
func (w *leanResponse) sendHead(complete bool) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	body := w.out // nothing is sent yet: out is the body so far
	w.chunked = !complete && bodyAllowed(w.status) && w.header.Get("Content-Length") == ""
	msg := w.appendHead(w.c.scratch[:0], body, complete)
	if w.chunked {
		msg = appendChunk(msg, body)
	} else {
		msg = append(msg, body...)
	}
	w.c.scratch, w.out = w.out[:0], msg // the two buffers take turns
	w.sent = true
}

// appendChunk appends p to dst as one chunk of chunked encoding; nothing when p is empty
// (an empty chunk would end the body).
func appendChunk(dst, p []byte) []byte {
	if len(p) == 0 {
		return dst
	}
	dst = strconv.AppendInt(dst, int64(len(p)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, p...)
	return append(dst, "\r\n"...)
}

// send writes out and empties it.
func (w *leanResponse) send() error {
	if w.err == nil && len(w.out) > 0 {
		w.err = w.c.write(w.out)
	}
	w.out = w.out[:0]
	return w.err
}

// appendHead appends the status line and header fields to b, as net/http writes them:
// the handler's fields, then Date, Content-Length (when complete says the body is
// whole, or chunked encoding after Flush) and a sniffed Content-Type.
func (w *leanResponse) appendHead(b, body []byte, complete bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	for k, vs := range w.header {
		if k == "Connection" {
			for _, v := range vs {
				w.close = w.close || httpascii.EqualFold([]byte(v), "close")
			}
		}
		for _, v := range vs {
			b = appendField(b, k, v)
		}
	}
	if !w.close && w.c.srv.shutting.Load() { // as net/http does once shutting down
		w.close = true
		b = append(b, "Connection: close\r\n"...)
	}
	if _, ok := w.header["Date"]; !ok {
		b = append(b, "Date: "...)
		b = append(b, w.c.srv.date.get()...)
		b = append(b, "\r\n"...)
	}
	if bodyAllowed(w.status) {
		if _, ok := w.header["Content-Type"]; !ok && len(body) > 0 {
			b = appendField(b, "Content-Type", http.DetectContentType(body))
		}
		switch _, ok := w.header["Content-Length"]; {
		case ok:
		case complete:
			b = append(b, "Content-Length: "...)
			b = strconv.AppendInt(b, int64(len(body)), 10)
			b = append(b, "\r\n"...)
		default:
			b = append(b, "Transfer-Encoding: chunked\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	for i := range len(v) { // as net/http does, no CR or LF into the head
		if c := v[i]; c == '\r' || c == '\n' {
			b = append(b, ' ')
		} else {
			b = append(b, c)
		}
	}
	return append(b, "\r\n"...)
}

// bodyAllowed reports whether a response with this status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// dateCache formats the Date header once a second: a response compares the time with
// the end of the cached value's second, and formats the next value once it has passed.
type dateCache struct {
	v atomic.Pointer[cachedDate]
}

type cachedDate struct {
	until time.Time // the end of the second s names, by the monotonic clock
	s     []byte
}

func (d *dateCache) get() []byte {
	if c := d.v.Load(); c != nil && time.Now().Before(c.until) {
		return c.s
	}
	now := time.Now()
	c := &cachedDate{until: now.Add(time.Second - time.Duration(now.Nanosecond())), s: now.UTC().AppendFormat(nil, http.TimeFormat)}
	d.v.Store(c)
	return c.s
}
