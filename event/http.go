package event

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// Media types of the CloudEvents HTTP binding.
const (
	MediaTypeStructured = "application/cloudevents+json"
	MediaTypeBatch      = "application/cloudevents-batch+json"
	mediaTypePrefix     = "application/cloudevents"
)

// HTTPError is a request Sluice will not accept, with the status to answer and a one-line
// reason for the body.
type HTTPError struct {
	Status int
	Err    error
}

func (e *HTTPError) Error() string { return e.Err.Error() }
func (e *HTTPError) Unwrap() error { return e.Err }

func httpErr(status int, err error) *HTTPError { return &HTTPError{Status: status, Err: err} }

// ErrTooLarge is the cause of a 413: the body exceeds the configured limit.
var ErrTooLarge = errors.New("body exceeds the size limit")

// Mode is how an HTTP message carries its events.
type Mode int

// The three modes of the CloudEvents HTTP binding.
const (
	ModeBinary Mode = iota
	ModeStructured
	ModeBatch
)

// ModeOf classifies a Content-Type header value. Structured or batch in a format other
// than JSON is an *HTTPError with status 415.
func ModeOf(contentType string) (Mode, error) {
	if len(contentType) < len(mediaTypePrefix) || !strings.EqualFold(contentType[:len(mediaTypePrefix)], mediaTypePrefix) {
		return ModeBinary, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return ModeBinary, httpErr(http.StatusUnsupportedMediaType, fmt.Errorf("content-type %q: %w", contentType, err))
	}
	switch mt {
	case MediaTypeStructured:
		return ModeStructured, nil
	case MediaTypeBatch:
		return ModeBatch, nil
	}
	return ModeBinary, httpErr(http.StatusUnsupportedMediaType,
		fmt.Errorf("content-type %q: only %s and %s are supported", mt, MediaTypeStructured, MediaTypeBatch))
}

// ReadRequest reads the events of an HTTP request in any of the three modes. The body may
// hold at most maxBytes. Errors are *HTTPError: 400 for an invalid event, 413 for a body
// over the limit, 415 for an unsupported structured format.
func ReadRequest(r *http.Request, maxBytes int64) ([]*Event, error) {
	body, err := readBody(r.Body, r.ContentLength, maxBytes)
	if err != nil {
		return nil, err
	}
	return Parse(r.Header, body)
}

// ReadResponse reads the event a response carries (a reply), if any; a response without
// an event (no ce-specversion header and not structured) returns nil, nil.
func ReadResponse(resp *http.Response, maxBytes int64) (*Event, error) {
	mode, err := ModeOf(headerValue(resp.Header, "Content-Type"))
	if err != nil {
		return nil, err
	}
	if mode == ModeBinary && headerValue(resp.Header, hdrSpecVersion) == "" {
		return nil, nil
	}
	body, err := readBody(resp.Body, resp.ContentLength, maxBytes)
	if err != nil {
		return nil, err
	}
	evs, err := Parse(resp.Header, body)
	if err != nil {
		return nil, err
	}
	if len(evs) != 1 {
		return nil, httpErr(http.StatusBadRequest, fmt.Errorf("a reply must hold one event, not %d", len(evs)))
	}
	return evs[0], nil
}

// Parse builds the events of an HTTP message from its header and whole body. body is
// retained as the data of a binary-mode event.
func Parse(h http.Header, body []byte) ([]*Event, error) {
	mode, err := ModeOf(headerValue(h, "Content-Type"))
	if err != nil {
		return nil, err
	}
	var evs []*Event
	switch mode {
	case ModeStructured:
		e, err := ParseStructured(body)
		if err != nil {
			return nil, httpErr(http.StatusBadRequest, err)
		}
		evs = []*Event{e}
	case ModeBatch:
		if evs, err = ParseBatch(body); err != nil {
			return nil, httpErr(http.StatusBadRequest, err)
		}
	default:
		e, err := parseBinary(h, body)
		if err != nil {
			return nil, httpErr(http.StatusBadRequest, err)
		}
		evs = []*Event{e}
	}
	return evs, nil
}

// headerValue is h.Get(k) for a k already canonical: the first value, without
// canonicalising k again (a loop over it per call, twice per event on the hot path).
func headerValue(h http.Header, k string) string {
	if vs := h[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func readBody(r io.Reader, contentLength, maxBytes int64) ([]byte, error) {
	if r == nil || r == http.NoBody {
		return nil, nil
	}
	if contentLength > maxBytes {
		return nil, httpErr(http.StatusRequestEntityTooLarge, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, contentLength, maxBytes))
	}
	if contentLength >= 0 {
		if contentLength == 0 {
			return nil, nil
		}
		buf := make([]byte, contentLength)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, httpErr(http.StatusBadRequest, fmt.Errorf("reading body: %w", err))
		}
		return buf, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, httpErr(http.StatusBadRequest, fmt.Errorf("reading body: %w", err))
	}
	if int64(len(buf)) > maxBytes {
		return nil, httpErr(http.StatusRequestEntityTooLarge, fmt.Errorf("%w: limit %d bytes", ErrTooLarge, maxBytes))
	}
	if len(buf) == 0 {
		return nil, nil
	}
	return buf, nil
}

// parseBinary reads a binary-mode event: attributes from ce- headers (percent-decoded),
// datacontenttype from Content-Type, data the body unchanged. It stops at the first
// attribute over MaxAttributes.
func parseBinary(h http.Header, body []byte) (*Event, error) {
	e := &Event{Data: body, DataContentType: headerValue(h, "Content-Type")}
	n := 0 // attributes seen
	if e.DataContentType != "" {
		n++
	}
	for k, vs := range h {
		if len(k) < 4 || (k[0] != 'C' && k[0] != 'c') || (k[1] != 'e' && k[1] != 'E') || k[2] != '-' {
			continue
		}
		if n++; n > MaxAttributes {
			return nil, tooManyAttributes()
		}
		if len(vs) != 1 {
			return nil, invalid(strings.ToLower(k[3:]), "set more than once (%d %s headers)", len(vs), strings.ToLower(k))
		}
		v, err := decodeHeaderValue(vs[0])
		if err != nil {
			return nil, invalid(strings.ToLower(k), "%v", err)
		}
		switch k {
		case "Ce-Specversion":
			e.SpecVersion = v
		case "Ce-Id":
			e.ID = v
		case "Ce-Source":
			e.Source = v
		case "Ce-Type":
			e.Type = v
		case "Ce-Subject":
			e.Subject = v
		case "Ce-Time":
			e.Time = v
		case "Ce-Dataschema":
			e.DataSchema = v
		default:
			name := keys.name(k)
			switch name {
			case AttrDataContentType:
				return nil, invalid("ce-datacontenttype", "not allowed in binary mode; send Content-Type")
			case AttrSpecVersion, AttrID, AttrSource, AttrType, AttrSubject, AttrTime, AttrDataSchema:
				// A non-canonical spelling of a known attribute (HTTP/2 or a raw header map).
				if prev, _ := e.Get(name); prev != "" {
					return nil, invalid(name, "set more than once")
				}
				e.Set(name, v)
			default:
				if e.Extensions == nil {
					e.Extensions = make([]Extension, 0, min(len(h), MaxAttributes))
				}
				e.Extensions = append(e.Extensions, Extension{Name: name, Value: v})
			}
		}
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeHeaderValue percent-decodes a ce- header value as the HTTP binding asks: each
// "%XX" (two hex digits) is the byte XX. A '%' not followed by two hex digits is kept as
// it is, so a value a sender wrote without encoding ("100%", as cloudevents/sdk-go
// sends it) arrives unchanged. Validate checks the result is valid UTF-8.
func decodeHeaderValue(v string) (string, error) {
	if strings.IndexByte(v, '%') < 0 {
		return v, nil
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '%' && i+2 < len(v) && isHex(v[i+1]) && isHex(v[i+2]) {
			b = append(b, unhex(v[i+1])<<4|unhex(v[i+2]))
			i += 2
			continue
		}
		b = append(b, c)
	}
	return string(b), nil
}

func isHex(c byte) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// HeaderEncoding is how Sluice writes ce- header values in binary mode.
type HeaderEncoding int

// The header encodings.
const (
	// HeaderMinimal percent-encodes only what cannot travel in an HTTP header value as it
	// is: control characters (0x00–0x1F, 0x7F), a space or tab at either end (HTTP
	// parsers trim them), and a '%' followed by two hex digits (which a decoding receiver
	// would read as an escape). Everything else, spaces, quotes and non-ASCII UTF-8
	// included, is sent as the sender wrote it, so a receiver that does not percent-decode
	// (cloudevents/sdk-go, the JavaScript SDK, the Python SDK's v1 API) sees the value
	// byte for byte, and one that decodes (Sluice) sees it too.
	HeaderMinimal HeaderEncoding = iota
	// HeaderPercent percent-encodes as the CloudEvents HTTP binding's letter says: every
	// byte outside printable ASCII, space, '"' and '%'. For receivers that decode.
	HeaderPercent
)

// needsStrict reports whether c must be percent-encoded under HeaderPercent.
func needsStrict(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// needsMinimal reports whether byte i of v must be percent-encoded under HeaderMinimal.
// Callers test the common case (a printable byte other than '%') first, inline.
func needsMinimal(v string, i int) bool {
	switch c := v[i]; {
	case c < ' ' || c == 0x7f:
		return true
	case c == ' ':
		return i == 0 || i == len(v)-1
	case c == '%':
		return i+2 < len(v) && isHex(v[i+1]) && isHex(v[i+2])
	}
	return false
}

// needsEncoding reports whether byte i of v must be percent-encoded under enc.
func needsEncoding(v string, i int, enc HeaderEncoding) bool {
	if enc == HeaderPercent {
		return needsStrict(v[i])
	}
	if c := v[i]; c > ' ' && c != '%' && c != 0x7f {
		return false
	}
	return needsMinimal(v, i)
}

// EncodeHeaderValue encodes v for a ce- header with HeaderMinimal.
func EncodeHeaderValue(v string) string { return encodeHeaderValue(v, HeaderMinimal) }

// EncodeHeaderValueAs encodes v for a ce- header with enc.
func EncodeHeaderValueAs(v string, enc HeaderEncoding) string { return encodeHeaderValue(v, enc) }

func encodeHeaderValue(v string, enc HeaderEncoding) string {
	// The common case: nothing to encode, found in one pass of cheap comparisons.
	first := -1
	if enc == HeaderPercent {
		for i := 0; i < len(v); i++ {
			if needsStrict(v[i]) {
				first = i
				break
			}
		}
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; (c <= ' ' || c == '%' || c == 0x7f) && needsMinimal(v, i) {
				first = i
				break
			}
		}
	}
	if first < 0 {
		return v
	}
	n := 0
	for i := first; i < len(v); i++ {
		if needsEncoding(v, i, enc) {
			n++
		}
	}
	const hexdigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+2*n)
	b = append(b, v[:first]...)
	for i := first; i < len(v); i++ {
		c := v[i]
		if needsEncoding(v, i, enc) {
			b = append(b, '%', hexdigits[c>>4], hexdigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// Canonical header keys of the standard attributes, so writing them skips
// canonicalisation.
const (
	hdrSpecVersion = "Ce-Specversion"
	hdrID          = "Ce-Id"
	hdrSource      = "Ce-Source"
	hdrType        = "Ce-Type"
	hdrSubject     = "Ce-Subject"
	hdrTime        = "Ce-Time"
	hdrDataSchema  = "Ce-Dataschema"
)

// WriteHeaders sets the binary-mode headers of e on h with HeaderMinimal encoding.
func WriteHeaders(h http.Header, e *Event) { WriteHeadersAs(h, e, HeaderMinimal) }

// WriteHeadersAs sets the binary-mode headers of e on h, those EachHeader gives. The
// header values share one backing array, so writing costs one allocation (plus one per
// value that needs percent-encoding).
func WriteHeadersAs(h http.Header, e *Event, encoding HeaderEncoding) {
	vals := make([]string, 0, 8+len(e.Extensions))
	EachHeader(e, encoding, func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	})
}

// EachHeader calls fn with each binary-mode header of e, canonical name and value: one
// ce- header per set attribute, in the specification's order, then one per extension, in
// the event's order, each value encoded with enc; and Content-Type, not encoded, from
// datacontenttype. An extension with an empty value is still set, as "". The body is
// e.Data. Writers of HTTP/1.1 bytes append these directly, with no header map.
func EachHeader(e *Event, enc HeaderEncoding, fn func(name, value string)) {
	for _, a := range e.contextAttrs() {
		switch {
		case a.value == "":
		case a.name == AttrDataContentType:
			fn(a.header, a.value) // Content-Type is a plain header, not percent-encoded
		default:
			fn(a.header, encodeHeaderValue(a.value, enc))
		}
	}
	for _, x := range e.Extensions {
		fn(keys.key(x.Name), encodeHeaderValue(x.Value, enc))
	}
}
