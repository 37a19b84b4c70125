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

// TestValidateAttributeLimit: Validate holds events built in code to the same limit.
func TestValidateAttributeLimit(t *testing.T) {
	e := &Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t"}
	for i := range MaxAttributes - 4 {
		e.Extensions = append(e.Extensions, Extension{Name: "x" + strconv.Itoa(i), Value: "v"})
	}
	if err := e.Validate(); err != nil {
		t.Fatalf("%d attributes refused: %v", MaxAttributes, err)
	}
	e.Subject = "one more"
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "more than 400 attributes") {
		t.Fatalf("%d attributes: err = %v, want the limit", MaxAttributes+1, err)
	}
}
