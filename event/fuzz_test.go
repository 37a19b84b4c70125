package event

import (
	"encoding/json"
	"net/http"
	"net/url"
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
