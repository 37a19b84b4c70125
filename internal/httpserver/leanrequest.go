package httpserver

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluice-broker/sluice/internal/httpascii"
)

// The lean path's request parser. It understands the plainest HTTP/1.1 request — a POST
// in origin form with one Content-Length, no Transfer-Encoding, Expect, Upgrade or
// Connection option, header names that are tokens and values without control bytes —
// and reports anything else as not lean, for net/http to serve (lean.go). It never
// answers an error itself: a request it does not take is net/http's, byte for byte, so
// that every error code and limit stays net/http's.

// leanHead is a parsed request head. Spans are offsets into the head's bytes.
type leanHead struct {
	target     span // origin-form request target
	host       span
	hasHost    bool
	contentLen int64
	fields     []field // header fields other than Host, in order; reused between requests
}

type span struct{ start, end int }

// field is one header line: its name and its value without surrounding whitespace.
type field struct{ name, value span }

// parseLeanHead parses head, the bytes of a request up to and including the blank line
// that ends its headers, and reports whether the lean path takes the request.
func parseLeanHead(head []byte, h *leanHead) bool {
	h.target, h.host, h.hasHost, h.contentLen, h.fields = span{}, span{}, false, -1, h.fields[:0]
	line, pos, ok := cutLine(head, 0)
	if !ok {
		return false
	}
	method, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok || string(method) != http.MethodPost {
		return false
	}
	target, proto, ok := bytes.Cut(rest, []byte{' '})
	if !ok || string(proto) != "HTTP/1.1" || !leanTarget(target) {
		return false
	}
	h.target = span{len(method) + 1, len(method) + 1 + len(target)}
	for {
		start := pos
		line, pos, ok = cutLine(head, pos)
		if !ok {
			return false
		}
		if len(line) == 0 {
			return h.hasHost && h.contentLen >= 0
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 || !isToken(line[:colon]) {
			return false
		}
		name := line[:colon]
		vs, ve := colon+1, len(line)
		for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
			vs++
		}
		for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
			ve--
		}
		value := line[vs:ve]
		if !httpascii.ValidValue(value) {
			return false
		}
		f := field{name: span{start, start + colon}, value: span{start + vs, start + ve}}
		switch {
		case httpascii.EqualFold(name, "Host"):
			if h.hasHost || !validHost(value) {
				return false
			}
			h.host, h.hasHost = f.value, true
			continue
		case httpascii.EqualFold(name, "Content-Length"):
			if h.contentLen >= 0 {
				return false
			}
			if h.contentLen = parseLength(value); h.contentLen < 0 {
				return false
			}
		case httpascii.EqualFold(name, "Transfer-Encoding"), httpascii.EqualFold(name, "Expect"), httpascii.EqualFold(name, "Upgrade"):
			return false
		case httpascii.EqualFold(name, "Connection"):
			if !httpascii.EqualFold(value, "keep-alive") {
				return false
			}
		}
		h.fields = append(h.fields, f)
	}
}

// leanReq is what a request the lean path builds is made of: with WithRequestReuse,
// they are pooled and rebuilt for each request, header map included, so that building
// one allocates nothing but the head string.
type leanReq struct {
	r    http.Request
	u    url.URL
	hdr  http.Header
	vals []string
}

// request builds the *http.Request of a head parseLeanHead took in into (a fresh one if
// into is nil), as a copy of blank (which carries the context): s is the head as a string
// (one allocation; the target, host and every header value are substrings of it) and
// canon the server's header names (canon.go).
func (h *leanHead) request(into *leanReq, blank *http.Request, head []byte, s string, canon *canonNames) *http.Request {
	if into == nil {
		into = &leanReq{hdr: make(http.Header, len(h.fields))}
	} else {
		clear(into.hdr)
	}
	hdr := into.hdr
	if cap(into.vals) < len(h.fields) {
		into.vals = make([]string, len(h.fields))
	}
	vals := into.vals[:len(h.fields)]
	for i, f := range h.fields {
		key := canon.key(head[f.name.start:f.name.end])
		vals[i] = s[f.value.start:f.value.end]
		if vs, ok := hdr[key]; ok {
			hdr[key] = append(vs, vals[i])
		} else {
			hdr[key] = vals[i : i+1 : i+1]
		}
	}
	target := s[h.target.start:h.target.end]
	u := &into.u
	*u = url.URL{Path: target}
	if i := strings.IndexByte(target, '?'); i >= 0 {
		u.Path, u.RawQuery = target[:i], target[i+1:]
	}
	r := &into.r
	*r = *blank // its context: http.Request has no other way to set one without a copy
	r.Method = http.MethodPost
	r.URL = u
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = hdr
	r.ContentLength = h.contentLen
	r.Host = s[h.host.start:h.host.end]
	r.RequestURI = target
	return r
}

// cutLine returns the bytes of b from pos to the next CRLF and the position after it;
// ok is false without a CRLF, or with a CR or bare LF inside the line (net/http's to
// judge).
func cutLine(b []byte, pos int) (line []byte, next int, ok bool) {
	i := bytes.IndexByte(b[pos:], '\n')
	if i < 1 || b[pos+i-1] != '\r' {
		return nil, 0, false
	}
	line = b[pos : pos+i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, 0, false
	}
	return line, pos + i + 1, true
}

// leanTarget reports whether t is an origin-form target the lean path passes on as is:
// a path of bytes a URL path never escapes (so that url.URL's Path is the target's, with
// no RawPath), then optionally '?' and a query of visible ASCII. No percent-encoding or
// fragment: those need net/http's URL parsing and its errors.
func leanTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	query := false
	for _, c := range t {
		switch {
		case c <= ' ' || c >= 0x7f || c == '%' || c == '#':
			return false
		case c == '?':
			query = true
		case !query && !pathChars[c]:
			return false
		}
	}
	return true
}

// pathChars marks the bytes url.URL leaves as they are in a path.
var pathChars = alnumAnd("-_.~$&+,/:;=@")

// alnumAnd is the set of ASCII letters and digits and the bytes of extra.
func alnumAnd(extra string) (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range extra {
		t[c] = true
	}
	return t
}

// isToken reports whether b is a non-empty RFC 9110 token: a valid header name.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c >= 0x80 || !tokenChars[c] {
			return false
		}
	}
	return true
}

// tokenChars marks the bytes allowed in a token.
var tokenChars = alnumAnd("!#$%&'*+-.^_`|~")

// validHost is a conservative check of a Host value: a non-empty name or address of
// letters, digits and . - _ : [ ]. Anything else is net/http's to judge.
func validHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		if c >= 0x80 || !hostChars[c] {
			return false
		}
	}
	return true
}

// hostChars marks the bytes validHost takes.
var hostChars = alnumAnd(".-_:[]")

// parseLength parses a Content-Length of at most 12 digits; -1 if it is not one.
func parseLength(v []byte) int64 {
	if len(v) == 0 || len(v) > 12 {
		return -1
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
