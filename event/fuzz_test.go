package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary headers and bodies through the ingress parser: it must never
// panic, every accepted event must validate, and an accepted event must survive a trip
// through binary-mode headers and the storage codec unchanged.
func FuzzParse(f *testing.F) {
	f.Add("", "1.0", "id", "/src", "type", "", "ext", "v", []byte(`{"a":1}`))
	f.Add(MediaTypeStructured, "", "", "", "", "", "", "", []byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"x":[1,2]}}`))
	f.Add(MediaTypeBatch, "", "", "", "", "", "", "", []byte(`[{"specversion":"1.0","id":"1","source":"/s","type":"t","n":1}]`))
	f.Add("text/plain", "1.0", "%E2%82%AC", "/s", "t", "2026-01-01T00:00:00Z", "my_ext", "%zz", []byte("x"))
	f.Fuzz(func(t *testing.T, ct, sv, id, src, typ, tm, extName, extVal string, body []byte) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h[k] = []string{v}
			}
		}
		set("Content-Type", ct)
		set("Ce-Specversion", sv)
		set("Ce-Id", id)
		set("Ce-Source", src)
		set("Ce-Type", typ)
		set("Ce-Time", tm)
		if extName != "" {
			set("Ce-"+extName, extVal)
		}
		evs, err := Parse(h, body)
		if err != nil {
			return
		}
		for _, e := range evs {
			if err := e.Validate(); err != nil {
				t.Fatalf("accepted an invalid event: %v", err)
			}
			out := http.Header{}
			WriteHeaders(out, e)
			back, err := Parse(out, e.Data)
			if err != nil {
				t.Fatalf("re-parsing written headers: %v (headers %v)", err, out)
			}
			assertSameEvent(t, e, back[0])
			dec, err := DecodeBinary(AppendBinary(nil, e))
			if err != nil {
				t.Fatal(err)
			}
			assertSameEvent(t, e, dec)
		}
	})
}

// FuzzValidJSON: what validJSON (fastjson) accepts, encoding/json accepts too, so that
// AppendJSON never embeds data a JSON parser refuses; and the batch AppendJSON writes
// for such data is itself valid JSON.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2,{"b":null}]`, `"x"`, ` 1e5 `, `01`, `1.`, `-`, `{"a":1,}`,
		`"\u00zz"`, "\"\x01\"", `[`, `tru`, `{"a":"\ud800"}`, "\xff", `{}{}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !validJSON(b) {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("validJSON accepted %q, encoding/json refuses it", b)
		}
		e := &Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", DataContentType: "application/json", Data: b}
		if out := AppendJSON(nil, e); !json.Valid(out) {
			t.Fatalf("AppendJSON wrote invalid JSON for data %q: %s", b, out)
		}
	})
}

// FuzzPlainReference holds Validate's shortcut for sources to url.Parse: a source
// plainReference takes must be one url.Parse accepts.
func FuzzPlainReference(f *testing.F) {
	for _, s := range []string{"/s", "sluice.loadkit", "https://example.com/x/y", "urn:a:b", "//h/p", "a:b", "http://",
		"http://h:80/", "http://[::1]/", "%zz", "a/b c", "1http://h/", "h+t.t-p://h~_./", "http://h", "./a:b", "-:/x", "http://a b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !plainReference(s) {
			return
		}
		if _, err := url.Parse(s); err != nil {
			t.Fatalf("plainReference took %q, url.Parse refuses it: %v", s, err)
		}
	})
}

// headerBlob turns fuzz text into a header: one "Name: value" per line, a name given
// again adding a value. A name written "~name" is kept as it is, not canonicalised, as
// an HTTP/2 or hand-built header map may hold it.
func headerBlob(blob string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(blob, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if raw, ok := strings.CutPrefix(k, "~"); ok {
			k = raw
		} else {
			k = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k))
		}
		h[k] = append(h[k], strings.TrimSpace(v))
	}
	return h
}

// manyLines is a header blob of n extension headers.
func manyLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "ce-x%d: v\n", i)
	}
	return b.String()
}

// attributeCount is the number of attributes e has.
func attributeCount(e *Event) int {
	n := len(e.Extensions)
	for _, a := range e.contextAttrs() {
		if a.value != "" {
			n++
		}
	}
	return n
}

// checkAccepted holds an event a parser accepted to what every parser promises: it
// validates, has at most MaxAttributes attributes, and comes back unchanged, extensions
// in order, from binary-mode headers, the JSON format and the storage codec.
func checkAccepted(t *testing.T, e *Event) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Fatalf("accepted an invalid event: %v", err)
	}
	if n := attributeCount(e); n > MaxAttributes {
		t.Fatalf("accepted an event of %d attributes", n)
	}
	out := http.Header{}
	WriteHeaders(out, e)
	back, err := Parse(out, e.Data)
	if err != nil {
		t.Fatalf("re-parsing written headers: %v (headers %v)", err, out)
	}
	assertSameEvent(t, e, back[0])
	fromJSON, err := ParseStructured(AppendJSON(nil, e))
	if err != nil {
		t.Fatalf("re-parsing the JSON format: %v (%s)", err, AppendJSON(nil, e))
	}
	if isJSONContentType(e.DataContentType) && validJSON(e.Data) {
		// Embedded as the "data" member, JSON data loses the white space around it.
		want := *e
		want.Data = bytes.Trim(e.Data, " \t\r\n")
		assertSameEvent(t, &want, fromJSON)
	} else {
		assertSameEvent(t, e, fromJSON)
	}
	if !slices.Equal(e.Extensions, fromJSON.Extensions) {
		t.Fatalf("extensions reordered through JSON: %v, then %v", e.Extensions, fromJSON.Extensions)
	}
	dec, err := DecodeBinary(AppendBinary(nil, e))
	if err != nil {
		t.Fatal(err)
	}
	assertSameEvent(t, e, dec)
}

// FuzzParseBinary feeds arbitrary header sets, duplicates, odd spellings and hundreds of
// ce- headers included, through the binary-mode parser.
func FuzzParseBinary(f *testing.F) {
	base := "ce-specversion: 1.0\nce-id: 1\nce-source: /s\nce-type: t\n"
	for _, s := range []string{
		base + "Content-Type: text/plain\nce-ext: v",
		base + "ce-ext: a\nce-ext: b",
		base + "~ce-id: 2",
		base + "~ce-ext: a\n~Ce-Ext: b",
		base + "ce-subject: caf%C3%A9\nce-dataschema: https://example.com/%FF",
		base + "ce-subject: a%ED%A0%80",
		base + "ce-datacontenttype: text/plain",
		base + "ce-time: 2026-01-01T00:00:00Z\nce-knativebrokerttl: 255",
		base + manyLines(MaxAttributes-4),
		base + manyLines(MaxAttributes-3),
	} {
		f.Add(s, []byte("x"))
	}
	f.Fuzz(func(t *testing.T, blob string, body []byte) {
		h := headerBlob(blob)
		if mode, err := ModeOf(headerValue(h, "Content-Type")); err != nil || mode != ModeBinary {
			return // structured and batch have fuzz targets of their own
		}
		e, err := parseBinary(h, body)
		if err != nil {
			return
		}
		checkAccepted(t, e)
	})
}

// FuzzParseStructured feeds arbitrary bytes to the JSON-format parser.
func FuzzParseStructured(f *testing.F) {
	base := `"specversion":"1.0","id":"1","source":"/s","type":"t"`
	for _, s := range []string{
		`{` + base + `,"data":{"x":[1,2]}}`,
		`{` + base + `,"datacontenttype":"text/plain","data":"hi \"you\""}`,
		`{` + base + `,"data_base64":"AAEC","n":1,"b":true,"s":"x","z":null}`,
		`{` + base + `,"ext":"a","ext":"b"}`,
		`{` + base + `,"data":1,"data":null}`,
		`{` + base + `,"subject":"caf` + "\xff" + `"}`,
		`{` + base + `,"subject":"\ud800"}`,
		`{` + base + `,"subject":"\ud83d\ude00 \\ud800"}`,
		`{` + base + `,"\u0069d":"2"}`,
		`{` + base + `} {}`,
		string(manyAttrJSON(MaxAttributes - 5)), // at the limit
		string(manyAttrJSON(MaxAttributes - 4)), // one over
		`null`, `[]`, `{"specversion":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := ParseStructured(b)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a *ValidationError", err)
			}
			return
		}
		checkAccepted(t, e)
	})
}

// FuzzParseBatch feeds arbitrary bytes to the batch parser: what it accepts comes back
// unchanged from a batch written with AppendJSON.
func FuzzParseBatch(f *testing.F) {
	ev := `{"specversion":"1.0","id":"1","source":"/s","type":"t"`
	for _, s := range []string{
		`[]`, `[` + ev + `}]`, `[` + ev + `},` + ev + `,"data":"x"}]`,
		`[` + ev + `,"x":"1","x":"2"}]`, `[` + ev + `}] x`, `[1]`, `[` + ev + `},`, `null`,
		`[` + string(manyAttrJSON(MaxAttributes-5)) + `,` + string(manyAttrJSON(MaxAttributes-4)) + `]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := ParseBatch(b)
		if err != nil {
			return
		}
		out := []byte{'['}
		for i, e := range evs {
			checkAccepted(t, e)
			if i > 0 {
				out = append(out, ',')
			}
			out = AppendJSON(out, e)
		}
		back, err := ParseBatch(append(out, ']'))
		if err != nil || len(back) != len(evs) {
			t.Fatalf("re-parsing %s: %d events, %v; want %d", out, len(back), err, len(evs))
		}
		for i := range evs {
			assertSameEvent(t, evs[i], back[i])
		}
	})
}

// FuzzReadResponse feeds arbitrary subscriber responses (headers and body, any mode)
// to the reply reader.
func FuzzReadResponse(f *testing.F) {
	base := "ce-specversion: 1.0\nce-id: 1\nce-source: /s\nce-type: t\n"
	for _, s := range []struct {
		h    string
		body string
	}{
		{base + "Content-Type: text/plain", "hi"},
		{"Content-Type: text/plain", "not an event"},
		{"Content-Type: " + MediaTypeStructured, `{"specversion":"1.0","id":"1","source":"/s","type":"t","x":"1","x":"2"}`},
		{"Content-Type: " + MediaTypeBatch, `[{"specversion":"1.0","id":"1","source":"/s","type":"t"}]`},
		{"Content-Type: " + MediaTypeBatch, `[]`},
		{base + manyLines(MaxAttributes-3), ""},
		{base + "ce-ext: a\nce-ext: b", ""},
	} {
		f.Add(s.h, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, blob string, body []byte) {
		resp := &http.Response{StatusCode: http.StatusOK, Header: headerBlob(blob),
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
		e, err := ReadResponse(resp, 1<<20)
		switch {
		case err != nil:
			var he *HTTPError
			if !errors.As(err, &he) || he.Status < 400 {
				t.Fatalf("error %v is not an *HTTPError with a 4xx status", err)
			}
		case e != nil:
			checkAccepted(t, e)
		}
	})
}

// FuzzValidUTF8JSON holds validUTF8JSON to encoding/json: a JSON value it passes decodes
// without U+FFFD replacing anything, and one it refuses does not. Inputs that hold
// U+FFFD already (raw or escaped) are skipped: they would hide a replacement.
func FuzzValidUTF8JSON(f *testing.F) {
	for _, s := range []string{`"plain"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00\ud800"`, `"\\ud800"`, `"\\\ud800"`,
		"\"\xff\"", `{"a":["\ud800x"]}`, `"\ud800\u0041"`, `1`, `"\uD83D\uDE00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || bytes.Contains(b, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(b), []byte("fffd")) {
			return
		}
		// Every string, member names included, as encoding/json decodes it.
		var decoded []string
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if s, ok := tok.(string); ok {
				decoded = append(decoded, s)
			}
		}
		replaced := slices.ContainsFunc(decoded, func(s string) bool { return strings.ContainsRune(s, '\uFFFD') })
		if got := validUTF8JSON(b); got == replaced {
			t.Fatalf("validUTF8JSON(%q) = %v, but encoding/json decodes its strings to %q", b, got, decoded)
		}
	})
}

// FuzzJSONScanner holds jsonScanner to encoding/json: for any valid JSON object or
// array, it splits out the same members (names and raw values) or elements, in order.
func FuzzJSONScanner(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":1,"b":[1,{"c":"}"}],"a":null}`, ` [ "x\"]" , {} , -1.5e3 ,true ] `,
		`{"\\":"\\\"","k\"ey":{"":[[]]}}`, "{\n\"a\"\t:\r\"b\"\n}", `[{"specversion":"1.0"},{"id":"2"}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		type member struct{ name, raw string }
		var want, got []member
		dec := json.NewDecoder(bytes.NewReader(b))
		tok, _ := dec.Token()
		if tok != json.Delim('{') && tok != json.Delim('[') {
			return
		}
		for dec.More() {
			var m member
			if tok == json.Delim('{') {
				k, _ := dec.Token()
				m.name = k.(string)
			}
			var r json.RawMessage
			if err := dec.Decode(&r); err != nil {
				t.Fatal(err)
			}
			m.raw = string(r)
			want = append(want, m)
		}
		s := &jsonScanner{b: b}
		open := s.peek()
		end := byte('}')
		if open == '[' {
			end = ']'
		}
		s.i++
		for s.more(end) {
			var m member
			if open == '{' {
				if err := json.Unmarshal(s.value(), &m.name); err != nil {
					t.Fatal(err)
				}
				s.colon()
			}
			m.raw = string(s.value())
			got = append(got, m)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("jsonScanner split %q into %q, encoding/json into %q", b, got, want)
		}
		if s.peek() != 0 {
			t.Fatalf("jsonScanner stopped at %d of %q", s.i, b)
		}
	})
}
