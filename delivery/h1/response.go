package h1

import (
	"bufio"
	"bytes"
	"net/http"

	"github.com/sluice-broker/sluice/internal/httpascii"
)

// The answer most deliveries get is the plainest there is: "HTTP/1.1 202 Accepted", a
// Date, "Content-Length: 0". Reading it with net/http's parser (textproto, a header map,
// a string per line) took a share of the broker's CPU under overload
// (docs/decisions/0003-delivery-http1-transport.md); leanResponse reads
// that shape itself and leaves any other response, byte for byte, to net/http
// (readFinalResponse), so that every status, header and body a subscriber may send is
// read as net/http reads it.

// leanResponse returns the response at the head of br when all of it is buffered and it
// is an HTTP/1.1 2xx with "Content-Length: 0" and no other header than Date, Server and
// Connection (keep-alive or close), having consumed it. The response's Header is empty:
// those headers mean nothing to a delivery. For any other response it returns nil and
// consumes nothing.
func leanResponse(br *bufio.Reader) *http.Response {
	b, _ := br.Peek(br.Buffered())
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	statusLine, rest, _ := bytes.Cut(b[:end+2], []byte("\r\n"))
	code, ok := leanStatus(statusLine)
	if !ok {
		return nil
	}
	closing, length := false, false
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok || !plainValue(line) {
			return nil
		}
		value = bytes.Trim(value, " \t")
		switch {
		case httpascii.EqualFold(name, "Content-Length"):
			if length || string(value) != "0" {
				return nil
			}
			length = true
		case httpascii.EqualFold(name, "Connection"):
			switch {
			case httpascii.EqualFold(value, "close"):
				closing = true
			case !httpascii.EqualFold(value, "keep-alive"):
				return nil
			}
		case httpascii.EqualFold(name, "Date"), httpascii.EqualFold(name, "Server"):
		default:
			return nil
		}
	}
	if !length {
		return nil
	}
	status := statusText(statusLine[len("HTTP/1.1 "):])
	if _, err := br.Discard(end + 4); err != nil {
		return nil // cannot happen: the bytes are buffered
	}
	return &http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, ContentLength: 0, Close: closing,
	}
}

// leanStatus parses a status line "HTTP/1.1 2xx[ reason]" and returns its code.
func leanStatus(line []byte) (int, bool) {
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || string(line[:len(proto)]) != proto || !plainValue(line) {
		return 0, false
	}
	c := line[len(proto) : len(proto)+3]
	if c[0] != '2' || c[1] < '0' || c[1] > '9' || c[2] < '0' || c[2] > '9' {
		return 0, false
	}
	if len(line) > len(proto)+3 && line[len(proto)+3] != ' ' {
		return 0, false
	}
	return 200 + int(c[1]-'0')*10 + int(c[2]-'0'), true
}

// statusText is the string of a response's status ("202 Accepted"): the common ones
// without an allocation.
func statusText(b []byte) string {
	switch string(b) { // compared without a conversion
	case "202 Accepted":
		return "202 Accepted"
	case "200 OK":
		return "200 OK"
	case "204 No Content":
		return "204 No Content"
	}
	return string(b)
}

// plainValue reports whether v holds only visible ASCII, spaces and tabs.
func plainValue(v []byte) bool {
	for _, c := range v {
		if (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}
