package event

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// manyAttrHeaders is a binary-mode header with the four required attributes, Content-Type
// (datacontenttype) and exts extensions: 5+exts attributes.
func manyAttrHeaders(exts int) http.Header {
	h := http.Header{"Content-Type": {"text/plain"}, "Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
	for i := range exts {
		h["Ce-X"+strconv.Itoa(i)] = []string{"v"}
	}
	return h
}

// manyAttrJSON is the JSON format of an event with the same 5+exts attributes.
func manyAttrJSON(exts int) []byte {
	b := []byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain"`)
	for i := range exts {
		b = fmt.Appendf(b, `,"x%d":"v"`, i)
	}
	return append(b, `,"data":"hi"}`...)
}

// TestAttributeLimit: an event of MaxAttributes attributes is accepted and one more is
// refused with 400 naming the limit, on every path that reads an event: binary and
// structured requests, batches, and a subscriber's reply. 50,000 extensions (40,000 ce-
// headers in a reply) are refused the same way, having been looked at no further than
// the limit.
func TestAttributeLimit(t *testing.T) {
	batch := func(exts int) []byte {
		ok := manyAttrJSON(0)
		return bytes.Join([][]byte{[]byte("["), ok, []byte(","), manyAttrJSON(exts), []byte("]")}, nil)
	}
	reply := func(h http.Header, body []byte) func() ([]*Event, error) {
		return func() ([]*Event, error) {
			resp := &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
			e, err := ReadResponse(resp, 1<<20)
			return []*Event{e}, err
		}
	}
	structured := http.Header{"Content-Type": {MediaTypeStructured}}
	batchHeader := http.Header{"Content-Type": {MediaTypeBatch}}
	parse := func(h http.Header, body []byte) func() ([]*Event, error) {
		return func() ([]*Event, error) { return Parse(h, body) }
	}
	const fits = MaxAttributes - 5 // extensions beside the five other attributes
	tests := []struct {
		name    string
		read    func() ([]*Event, error)
		wantErr string // "": accepted
	}{
		{"binary at the limit", parse(manyAttrHeaders(fits), []byte("hi")), ""},
		{"binary one over", parse(manyAttrHeaders(fits+1), []byte("hi")), "more than 400 attributes"},
		{"binary 50000 extensions", parse(manyAttrHeaders(50000), []byte("hi")), "more than 400 attributes"},
		{"structured at the limit", parse(structured, manyAttrJSON(fits)), ""},
		{"structured one over", parse(structured, manyAttrJSON(fits+1)), "more than 400 attributes"},
		{"structured 50000 extensions", parse(structured, manyAttrJSON(50000)), "more than 400 attributes"},
		{"batch at the limit", parse(batchHeader, batch(fits)), ""},
		{"batch one over", parse(batchHeader, batch(fits+1)), "batch[1]: invalid event: more than 400 attributes"},
		{"batch 50000 extensions", parse(batchHeader, batch(50000)), "batch[1]: invalid event: more than 400 attributes"},
		{"reply at the limit", reply(manyAttrHeaders(fits), []byte("hi")), ""},
		{"reply 40000 ce- headers", reply(manyAttrHeaders(40000), []byte("hi")), "more than 400 attributes"},
		{"structured reply 50000 extensions", reply(structured, manyAttrJSON(50000)), "more than 400 attributes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := tt.read()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				e := evs[len(evs)-1]
				if n := len(e.Extensions); n != fits {
					t.Fatalf("%d extensions, want %d", n, fits)
				}
				return
			}
			var he *HTTPError
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
				t.Fatalf("err = %v, want a 400", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "at most 400") {
				t.Fatalf("err = %q, want %q and the limit", err, tt.wantErr)
			}
		})
	}
}

// TestBadAttributeBothModes sends the same bad attribute in binary and structured mode
// and expects the same refusal: 400, naming the attribute, for the same reason. Invalid
// UTF-8 travels percent-encoded in a header and raw (or as a lone surrogate escape) in
// JSON; a duplicate is a header given twice and a member given twice.
func TestBadAttributeBothModes(t *testing.T) {
	tests := []struct {
		name       string
		attr       string   // the attribute at fault
		header     []string // its ce- header values in binary mode (Content-Type for datacontenttype)
		member     string   // its members in structured mode, JSON
		wantReason string   // the start of the reason
	}{
		{"subject not UTF-8", "subject", []string{"caf%FF"}, `"subject":"caf` + "\xff" + `"`, "not valid UTF-8"},
		{"subject lone surrogate", "subject", []string{"a%ED%A0%80"}, `"subject":"a\ud800"`, "not valid UTF-8"},
		{"id not UTF-8", "id", []string{"%C3"}, `"id":"` + "\xc3" + `"`, "not valid UTF-8"},
		{"source not UTF-8", "source", []string{"/s/%FE"}, `"source":"/s/` + "\xfe" + `"`, "not valid UTF-8"},
		{"type not UTF-8", "type", []string{"t%80"}, `"type":"t` + "\x80" + `"`, "not valid UTF-8"},
		{"dataschema not UTF-8", "dataschema", []string{"https://example.com/%FF"}, `"dataschema":"https://example.com/` + "\xff" + `"`, "not valid UTF-8"},
		{"time not UTF-8", "time", []string{"2026-01-01T00:00:00Z%FF"}, `"time":"2026-01-01T00:00:00Z` + "\xff" + `"`, "not valid UTF-8"},
		{"datacontenttype not UTF-8", "datacontenttype", []string{"text/plain\xff"}, `"datacontenttype":"text/plain` + "\xff" + `"`, "not valid UTF-8"},
		{"extension not UTF-8", "ext", []string{"%E2%82"}, `"ext":"` + "\xe2\x82" + `"`, "not valid UTF-8"},
		{"extension low surrogate first", "ext", []string{"%ED%B0%80%ED%A0%80"}, `"ext":"\udc00\ud800"`, "not valid UTF-8"},
		{"extension twice", "ext", []string{"a", "b"}, `"ext":"a","ext":"b"`, "set more than once"},
		{"subject twice", "subject", []string{"a", "b"}, `"subject":"a","subject":"b"`, "set more than once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
			key := "Ce-" + strings.ToUpper(tt.attr[:1]) + tt.attr[1:]
			if tt.attr == AttrDataContentType {
				key = "Content-Type"
			}
			h[key] = tt.header
			base := map[string]string{"specversion": `"1.0"`, "id": `"1"`, "source": `"/s"`, "type": `"t"`}
			body := "{" + tt.member
			for k, v := range base {
				if !strings.Contains(tt.member, `"`+k+`"`) {
					body += `,"` + k + `":` + v
				}
			}
			body += "}"
			for _, mode := range []struct {
				name string
				h    http.Header
				body []byte
			}{
				{"binary", h, []byte("x")},
				{"structured", http.Header{"Content-Type": {MediaTypeStructured}}, []byte(body)},
			} {
				evs, err := Parse(mode.h, mode.body)
				var he *HTTPError
				var ve *ValidationError
				if !errors.As(err, &he) || he.Status != http.StatusBadRequest || !errors.As(err, &ve) {
					t.Fatalf("%s: got %v, err %v, want a 400", mode.name, evs, err)
				}
				if ve.Attribute != tt.attr || !strings.HasPrefix(ve.Reason, tt.wantReason) {
					t.Errorf("%s: %q, want %s: %s", mode.name, err, tt.attr, tt.wantReason)
				}
			}
		})
	}
}

// TestStructuredMembers: the JSON format is read member by member: every duplicate is
// refused whatever its kind, extensions keep their order, and what follows the object
// is refused.
func TestStructuredMembers(t *testing.T) {
	const base = `"specversion":"1.0","id":"1","source":"/s","type":"t"`
	tests := []struct {
		body    string
		wantErr string // "": accepted
	}{
		{`{` + base + `,"b":"1","a":"2","c":"3"}`, ""},
		{`{` + base + `,"id":"2"}`, "id: set more than once"},
		{`{` + base + `,"ext":null,"ext":"x"}`, "ext: set more than once"},
		{`{` + base + `,"data":1,"data":2}`, "data: set more than once"},
		{`{` + base + `,"data":null,"data":2}`, "data: set more than once"},
		{`{` + base + `,"data_base64":"AA==","data_base64":"AQ=="}`, "data_base64: set more than once"},
		{`{` + base + `,"\u0069d":"2"}`, "id: set more than once"},
		{`{` + base + `} {}`, "after top-level value"},
		{`{` + base + `,"ext":"\ud83d\ude00"}`, ""},
		{`{` + base + `,"ext":"\\ud800"}`, ""},
		{`{` + base + `,"a` + "\xff" + `":"x"}`, `invalid event: "a\xff": extension names`},
		{`null`, "not a JSON object: found null"},
		{`[]`, "not a JSON object: found an array"},
		{``, "not a JSON object: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		_, err := ParseStructured([]byte(tt.body))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.body, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want %q", tt.body, err, tt.wantErr)
		}
	}
	e, err := ParseStructured([]byte(`{` + base + `,"b":"1","a":"2","c":"3"}`))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(e.Extensions) != "[{b 1} {a 2} {c 3}]" {
		t.Errorf("extensions %v, want b, a, c in the order received", e.Extensions)
	}
	spaced := " {\n \"specversion\" : \"1.0\" ,\t\"id\":\"1\\\"}\\\\\", \"source\":\"/s\",\"type\":\"t\",\"n\" : -1 , \"data\" : { \"a\" : [ 1 , \"x\\\"}]\" , {} ] } \r\n} "
	if e, err := ParseStructured([]byte(spaced)); err != nil || e.ID != `1"}\` || string(e.Data) != `{ "a" : [ 1 , "x\"}]" , {} ] }` {
		t.Errorf("%s: %+v, %v", spaced, e, err)
	}
	if _, err := ParseBatch([]byte(`[{` + base + `},1]`)); err == nil || !strings.Contains(err.Error(), "batch[1]: not a JSON object: found a number") {
		t.Errorf("batch with a number: err = %v", err)
	}
	if _, err := ParseBatch([]byte(`[{` + base + `}] x`)); err == nil || !strings.Contains(err.Error(), "after top-level value") {
		t.Errorf("batch with trailing data: err = %v", err)
	}
	if _, err := ParseBatch([]byte(`[{` + base + `},{` + base + `,"x":"1","x":"2"}]`)); err == nil || !strings.Contains(err.Error(), "batch[1]: invalid event: x: set more than once") {
		t.Errorf("batch with a duplicate: err = %v", err)
	}
}
