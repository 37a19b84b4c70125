package event

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// ParseStructured parses one event in the JSON event format (application/cloudevents+json).
func ParseStructured(b []byte) (*Event, error) {
	if !json.Valid(b) {
		return nil, &ValidationError{Reason: "not a JSON object: " + syntaxReason(b)}
	}
	s := &jsonScanner{b: b}
	if c := s.peek(); c != '{' {
		return nil, &ValidationError{Reason: "not a JSON object: " + kindOf(c)}
	}
	return parseObject(s)
}

// ParseBatch parses a JSON array of events (application/cloudevents-batch+json).
func ParseBatch(b []byte) ([]*Event, error) {
	if !json.Valid(b) {
		return nil, &ValidationError{Reason: "not a JSON array of events: " + syntaxReason(b)}
	}
	s := &jsonScanner{b: b}
	if c := s.peek(); c != '[' {
		return nil, &ValidationError{Reason: "not a JSON array of events: " + kindOf(c)}
	}
	s.i++
	var evs []*Event
	for i := 0; s.more(']'); i++ {
		if c := s.peek(); c != '{' {
			return nil, &ValidationError{Reason: fmt.Sprintf("batch[%d]: not a JSON object: %s", i, kindOf(c))}
		}
		e, err := parseObject(s)
		if err != nil {
			return nil, fmt.Errorf("batch[%d]: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// syntaxReason says why b is not valid JSON, with encoding/json's words and offset.
func syntaxReason(b []byte) string {
	var v json.RawMessage
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (offset %d)", se, se.Offset)
	}
	if err == nil { // json.Valid and json.Unmarshal disagree: not expected
		return "invalid JSON"
	}
	return err.Error()
}

// kindOf names the JSON value that starts with c, for a refusal.
func kindOf(c byte) string {
	switch c {
	case '{':
		return "found an object"
	case '[':
		return "found an array"
	case '"':
		return "found a string"
	case 't', 'f':
		return "found a boolean"
	case 'n':
		return "found null"
	}
	return "found a number"
}

func isNull(r []byte) bool { return string(r) == "null" }

// parseObject reads the event in the JSON format at s (at its '{') member by member, in
// one pass: work linear in the object's size, bounded at MaxAttributes attributes
// (members other than data and data_base64; a null one, an absent attribute, counts
// too). Unlike decoding into a map, it sees every member: a name given twice is
// refused, not overwritten, and extensions keep their order. A string value that is not
// valid UTF-8, raw or as a lone surrogate escape ("\ud800"), is refused rather than
// decoded to U+FFFD, as binary mode refuses such a value.
func parseObject(s *jsonScanner) (*Event, error) {
	s.i++ // the '{'
	e := &Event{}
	var data, data64 []byte // nil when absent or null
	var seenData, seenData64 bool
	var names []string // attribute members, null ones too, for the duplicate check
	for s.more('}') {
		k, err := jsonString(s.value())
		if err != nil {
			return nil, &ValidationError{Reason: "not a JSON object: " + err.Error()}
		}
		s.colon()
		r := s.value()
		switch k {
		case "data", "data_base64":
			seen, p := &seenData, &data
			if k == "data_base64" {
				seen, p = &seenData64, &data64
			}
			if *seen {
				return nil, invalid(k, "set more than once")
			}
			*seen = true
			if !isNull(r) {
				*p = r
			}
			continue
		}
		if len(names) == MaxAttributes {
			return nil, tooManyAttributes()
		}
		if !reservedName(k) && !ValidExtensionName(k) {
			if !utf8.ValidString(k) {
				k = strconv.Quote(k) // the refusal stays valid UTF-8
			}
			return nil, invalid(k, "extension names must be lower-case letters and digits only")
		}
		names = append(names, k)
		if !validUTF8JSON(r) {
			return nil, invalid(k, "not valid UTF-8")
		}
		if isNull(r) {
			continue // a null attribute is an absent one
		}
		if isContextAttr(k) {
			v, err := jsonString(r)
			if err != nil {
				return nil, invalid(k, "must be a JSON string")
			}
			if v == "" {
				return nil, invalid(k, "empty")
			}
			e.Set(k, v)
			continue
		}
		v, err := extensionValue(r)
		if err != nil {
			return nil, invalid(k, "%v", err)
		}
		e.Extensions = append(e.Extensions, Extension{Name: k, Value: v})
	}
	if i := firstDuplicate(len(names), func(i int) string { return names[i] }); i >= 0 {
		return nil, invalid(names[i], "set more than once")
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	switch {
	case data != nil && data64 != nil:
		return nil, invalid("data", "both data and data_base64 are set")
	case data64 != nil:
		s, err := jsonString(data64)
		if err != nil {
			return nil, invalid("data_base64", "must be a JSON string")
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, invalid("data_base64", "not base64: %v", err)
		}
		e.Data = d
	case data != nil:
		if !isJSONContentType(e.DataContentType) && data[0] == '"' {
			// Non-JSON data carried as a JSON string: the data is the string itself.
			if !validUTF8JSON(data) {
				return nil, invalid("data", "not valid UTF-8 (send such data as data_base64)")
			}
			s, err := jsonString(data)
			if err != nil {
				return nil, invalid("data", "%v", err)
			}
			e.Data = []byte(s)
		} else {
			e.Data = bytes.Clone(data) // not the whole body's array, for a batch's events
		}
	}
	return e, nil
}

// validUTF8JSON reports whether the JSON value r (valid JSON) decodes to valid UTF-8: its
// bytes are valid UTF-8 and every \u escape of a surrogate half (U+D800–U+DFFF) is a high
// half followed by a low one. encoding/json decodes either fault to U+FFFD.
func validUTF8JSON(r []byte) bool {
	if !utf8.Valid(r) {
		return false
	}
	for i := 0; ; {
		j := bytes.IndexByte(r[i:], '\\')
		if j < 0 {
			return true
		}
		i += j + 1 // at the escape's letter: valid JSON has one after every backslash
		if r[i] != 'u' {
			i++
			continue
		}
		switch surrogate(r[i+1:]) {
		case 'h': // must be followed by \u and a low half
			if len(r) < i+11 || r[i+5] != '\\' || r[i+6] != 'u' || surrogate(r[i+7:]) != 'l' {
				return false
			}
			i += 6
		case 'l':
			return false
		}
		i += 5
	}
}

// surrogate classifies the four hex digits at the start of b (a \u escape's): 'h' for a
// high surrogate half (D800–DBFF), 'l' for a low one (DC00–DFFF), 0 for anything else.
func surrogate(b []byte) byte {
	if len(b) < 4 || (b[0] != 'd' && b[0] != 'D') {
		return 0
	}
	switch b[1] {
	case '8', '9', 'a', 'A', 'b', 'B':
		return 'h'
	case 'c', 'C', 'd', 'D', 'e', 'E', 'f', 'F':
		return 'l'
	}
	return 0
}

// jsonString decodes r, one valid JSON value, as a string. A
// string without escapes is its bytes between the quotes: no decoder runs for it.
func jsonString(r []byte) (string, error) {
	if len(r) >= 2 && r[0] == '"' && bytes.IndexByte(r, '\\') < 0 {
		return string(r[1 : len(r)-1]), nil
	}
	var s string
	err := json.Unmarshal(r, &s)
	return s, err
}

// extensionValue turns a JSON extension value (valid JSON) into
// its canonical string form: strings as they are, numbers (integers only, as the spec's
// Integer type) and booleans as text.
func extensionValue(r []byte) (string, error) {
	switch r[0] {
	case '"':
		return jsonString(r)
	case 't':
		return "true", nil
	case 'f':
		return "false", nil
	case '{', '[':
		return "", errors.New("extension values must be strings, integers or booleans")
	}
	n, err := strconv.ParseInt(string(r), 10, 32)
	if err != nil {
		return "", fmt.Errorf("%s is not a 32-bit integer", r)
	}
	return strconv.FormatInt(n, 10), nil
}

// isJSONContentType reports whether data of content type ct is JSON: absent (the JSON
// format's default), application/json, text/json or any +json suffix.
func isJSONContentType(ct string) bool {
	if ct == "" || ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// AppendJSON appends e in the JSON event format to dst. JSON data (by datacontenttype)
// that is valid JSON is embedded as "data"; other data goes in "data_base64".
//
// Validity is checked with fastjson rather than encoding/json, which is several times
// slower, once per event of every batched delivery (BenchmarkAppendJSON;
// docs/benchmarks/hot-path.md, "Encoding a batched delivery").
// Whatever fastjson accepts encoding/json accepts too (FuzzValidJSON); what it refuses
// and encoding/json would accept (nesting deeper than fastjson's limit) goes as
// data_base64, which is correct for any data.
func AppendJSON(dst []byte, e *Event) []byte {
	dst = append(dst, '{')
	first := len(dst)
	field := func(k, v string) {
		if v == "" {
			return
		}
		if len(dst) > first {
			dst = append(dst, ',')
		}
		dst = appendJSONString(append(appendJSONString(dst, k), ':'), v)
	}
	for _, a := range e.contextAttrs() {
		field(a.name, a.value)
	}
	for _, x := range e.Extensions {
		// Extensions are written as strings: their canonical form. Empty values count.
		if len(dst) > first {
			dst = append(dst, ',')
		}
		dst = appendJSONString(append(appendJSONString(dst, x.Name), ':'), x.Value)
	}
	if e.Data != nil {
		if isJSONContentType(e.DataContentType) && validJSON(e.Data) {
			dst = append(dst, `,"data":`...)
			dst = append(dst, e.Data...)
		} else {
			dst = append(dst, `,"data_base64":"`...)
			dst = base64.StdEncoding.AppendEncode(dst, e.Data)
			dst = append(dst, '"')
		}
	}
	return append(dst, '}')
}

// validJSON reports whether b is one valid JSON value (see AppendJSON). fastjson lets
// raw control characters through inside strings, which JSON forbids: data with any byte
// below 0x20 (pretty-printed JSON's newlines and tabs too) is checked by encoding/json.
func validJSON(b []byte) bool {
	if fastjson.ValidateBytes(b) != nil {
		return false
	}
	if hasControl(b) {
		return json.Valid(b)
	}
	return true
}

// hasControl reports whether b has a byte below 0x20, eight bytes at a time: a word has
// one when subtracting 0x20 from each byte borrows into a byte whose top bit was clear.
func hasControl(b []byte) bool {
	const lo, hi = 0x2020202020202020, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if (x-lo)&^x&hi != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// appendJSONString appends s to dst as a JSON string. Only '"', '\\' and control
// characters (below 0x20) are escaped; everything else, multi-byte UTF-8 included, is
// copied as it is (JSON allows it; events are valid UTF-8, see Validate). strconv.Quote
// is not JSON: it writes \x01, \a, \v and \U0010ffff escapes, which JSON parsers refuse.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(append(dst, s[start:]...), '"')
}
