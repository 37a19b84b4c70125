package event

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func binaryRequest(headers map[string]string, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/ns/b", strings.NewReader(body))
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

func validHeaders(extra map[string]string) map[string]string {
	h := map[string]string{"ce-specversion": "1.0", "ce-id": "1", "ce-source": "/src", "ce-type": "t.a", "Content-Type": "application/json"}
	for k, v := range extra {
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
	return h
}

func TestReadRequestBinary(t *testing.T) {
	tests := []struct {
		name       string
		headers    map[string]string
		wantStatus int    // 0: valid
		wantErr    string // substring of the reason
		check      func(t *testing.T, e *Event)
	}{
		{name: "minimal", headers: validHeaders(nil), check: func(t *testing.T, e *Event) {
			if e.ID != "1" || e.Source != "/src" || e.Type != "t.a" || e.DataContentType != "application/json" || string(e.Data) != `{"a":1}` {
				t.Errorf("event = %+v", e)
			}
		}},
		{name: "extensions lower-cased header names", headers: validHeaders(map[string]string{"Ce-PartitionKey": "k1", "ce-traceparent": "00-abc"}),
			check: func(t *testing.T, e *Event) {
				if v, _ := e.Get("partitionkey"); v != "k1" {
					t.Errorf("partitionkey = %q", v)
				}
				if v, _ := e.Get("traceparent"); v != "00-abc" {
					t.Errorf("traceparent = %q", v)
				}
			}},
		{name: "percent-decoded", headers: validHeaders(map[string]string{"ce-subject": "caf%C3%A9%20%22x%22%25"}),
			check: func(t *testing.T, e *Event) {
				if e.Subject != `café "x"%` {
					t.Errorf("subject = %q", e.Subject)
				}
			}},
		{name: "plus stays plus", headers: validHeaders(map[string]string{"ce-subject": "a+b"}),
			check: func(t *testing.T, e *Event) {
				if e.Subject != "a+b" {
					t.Errorf("subject = %q", e.Subject)
				}
			}},
		{name: "time with fraction and offset", headers: validHeaders(map[string]string{"ce-time": "2026-11-22T01:02:03.123456789+01:00"})},
		{name: "missing specversion", headers: validHeaders(map[string]string{"ce-specversion": ""}), wantStatus: 400, wantErr: "specversion: missing"},
		{name: "specversion 0.3", headers: validHeaders(map[string]string{"ce-specversion": "0.3"}), wantStatus: 400, wantErr: `"0.3" is not supported`},
		{name: "missing id", headers: validHeaders(map[string]string{"ce-id": ""}), wantStatus: 400, wantErr: "id: missing"},
		{name: "missing source", headers: validHeaders(map[string]string{"ce-source": ""}), wantStatus: 400, wantErr: "source: missing"},
		{name: "missing type", headers: validHeaders(map[string]string{"ce-type": ""}), wantStatus: 400, wantErr: "type: missing"},
		{name: "bad time", headers: validHeaders(map[string]string{"ce-time": "yesterday"}), wantStatus: 400, wantErr: "time:"},
		{name: "bad extension name", headers: validHeaders(map[string]string{"ce-my_ext": "x"}), wantStatus: 400, wantErr: "my_ext: extension names"},
		{name: "dashed extension name", headers: validHeaders(map[string]string{"ce-my-ext": "x"}), wantStatus: 400, wantErr: "my-ext"},
		{name: "percent not an escape stays", headers: validHeaders(map[string]string{"ce-subject": "100% %zz %4"}),
			check: func(t *testing.T, e *Event) {
				if e.Subject != "100% %zz %4" {
					t.Errorf("subject = %q", e.Subject)
				}
			}},
		{name: "raw UTF-8 as sdk-go sends it", headers: validHeaders(map[string]string{"ce-subject": "Grüße aus Köln"}),
			check: func(t *testing.T, e *Event) {
				if e.Subject != "Grüße aus Köln" {
					t.Errorf("subject = %q", e.Subject)
				}
			}},
		{name: "invalid utf-8 after decoding", headers: validHeaders(map[string]string{"ce-subject": "%FF%FE"}), wantStatus: 400, wantErr: "UTF-8"},
		{name: "relative dataschema", headers: validHeaders(map[string]string{"ce-dataschema": "schema.json"}), wantStatus: 400, wantErr: "dataschema"},
		{name: "datacontenttype header", headers: validHeaders(map[string]string{"ce-datacontenttype": "text/plain"}), wantStatus: 400, wantErr: "Content-Type"},
		{name: "xml structured", headers: map[string]string{"Content-Type": "application/cloudevents+xml"}, wantStatus: 415, wantErr: "only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := ReadRequest(binaryRequest(tt.headers, `{"a":1}`), 1<<20)
			if tt.wantStatus != 0 {
				var he *HTTPError
				if !errors.As(err, &he) || he.Status != tt.wantStatus {
					t.Fatalf("err = %v, want status %d", err, tt.wantStatus)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %q, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 {
				t.Fatalf("got %d events", len(evs))
			}
			if tt.check != nil {
				tt.check(t, evs[0])
			}
		})
	}
}

func TestReadRequestTooLarge(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		r := binaryRequest(validHeaders(nil), strings.Repeat("x", 101))
		if chunked {
			r.ContentLength = -1
		}
		_, err := ReadRequest(r, 100)
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked=%v: err = %v, want 413", chunked, err)
		}
	}
}

func TestStructured(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		wantErr  string
		wantData string
		check    func(t *testing.T, e *Event)
	}{
		{name: "json data kept byte for byte", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"b": [1, 2]}}`, wantData: `{"b": [1, 2]}`},
		{name: "base64 data", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/octet-stream","data_base64":"AAEC"}`, wantData: "\x00\x01\x02"},
		{name: "text data as string", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":"hi \"you\""}`, wantData: `hi "you"`},
		{name: "json string data stays json", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"application/json","data":"hi"}`, wantData: `"hi"`},
		{name: "typed extensions", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","count":42,"flag":true,"name":"x","gone":null}`,
			check: func(t *testing.T, e *Event) {
				for k, want := range map[string]string{"count": "42", "flag": "true", "name": "x"} {
					if v, _ := e.Get(k); v != want {
						t.Errorf("%s = %q, want %q", k, v, want)
					}
				}
				if _, ok := e.Get("gone"); ok {
					t.Error("a null extension is set")
				}
			}},
		{name: "upper-case extension rejected", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","myExt":"x"}`, wantErr: "myExt"},
		{name: "object extension rejected", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":{}}`, wantErr: "ext"},
		{name: "float extension rejected", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":1.5}`, wantErr: "integer"},
		{name: "number id rejected", body: `{"specversion":"1.0","id":1,"source":"/s","type":"t"}`, wantErr: "id: must be a JSON string"},
		{name: "both data kinds", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":"AA=="}`, wantErr: "both"},
		{name: "not json", body: `{"specversion":`, wantErr: "not a JSON object"},
		{name: "0.3 rejected", body: `{"specversion":"0.3","id":"1","source":"/s","type":"t"}`, wantErr: "0.3"},
		{name: "control character in datacontenttype rejected", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain\u000d\u000aX-Evil: 1","data":"x"}`, wantErr: "datacontenttype: holds a control character"},
		{name: "tab in datacontenttype kept", body: `{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain;\tcharset=utf-8","data":"x"}`,
			check: func(t *testing.T, e *Event) {
				if e.DataContentType != "text/plain;\tcharset=utf-8" {
					t.Errorf("datacontenttype %q", e.DataContentType)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			r.Header.Set("Content-Type", "application/cloudevents+json; charset=utf-8")
			evs, err := ReadRequest(r, 1<<20)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantData != "" && string(evs[0].Data) != tt.wantData {
				t.Fatalf("data = %q, want %q", evs[0].Data, tt.wantData)
			}
			if tt.check != nil {
				tt.check(t, evs[0])
			}
		})
	}
}

func TestBatch(t *testing.T) {
	body := `[{"specversion":"1.0","id":"1","source":"/s","type":"t"},{"specversion":"1.0","id":"2","source":"/s","type":"t","data":"x"}]`
	h := http.Header{"Content-Type": {MediaTypeBatch}}
	evs, err := Parse(h, []byte(body))
	if err != nil || len(evs) != 2 || evs[1].ID != "2" {
		t.Fatalf("evs=%v err=%v", evs, err)
	}
	_, err = Parse(h, []byte(`[{"specversion":"1.0","id":"1","source":"/s","type":"t"},{"id":"2"}]`))
	if err == nil || !strings.Contains(err.Error(), "batch[1]") {
		t.Fatalf("err = %v, want batch[1]", err)
	}
}

func TestWriteHeadersRoundTrip(t *testing.T) {
	in := &Event{SpecVersion: "1.0", ID: "é 1", Source: "/s", Type: "t", Subject: ` 100% "sure" %41 `, Time: "2026-11-22T00:00:00Z",
		DataContentType: "text/plain", Extensions: []Extension{{"partitionkey", "k"}, {"tricky", "a\tb\u00ff\r\n"}}, Data: []byte("hello")}
	for _, enc := range []HeaderEncoding{HeaderMinimal, HeaderPercent} {
		h := http.Header{}
		WriteHeadersAs(h, in, enc)
		for k, vs := range h {
			for _, c := range []byte(vs[0]) {
				if c < ' ' || c == 0x7f || (enc == HeaderPercent && (c == ' ' || c >= 0x7f || c == '"')) {
					t.Fatalf("encoding %d: header %s = %q holds an unencoded byte", enc, k, vs[0])
				}
			}
		}
		evs, err := Parse(h, in.Data)
		if err != nil {
			t.Fatal(err)
		}
		assertSameEvent(t, in, evs[0])
	}
}

func TestEncodeHeaderValue(t *testing.T) {
	tests := []struct{ in, minimal, percent string }{
		{"plain", "plain", "plain"},
		{"Grüße aus Köln", "Grüße aus Köln", "Gr%C3%BC%C3%9Fe%20aus%20K%C3%B6ln"},
		{`say "hi"`, `say "hi"`, "say%20%22hi%22"},
		{"100%", "100%", "100%25"},
		{"%41", "%2541", "%2541"},
		{" edge ", "%20edge%20", "%20edge%20"},
		{"a\r\nb\tc\x7f", "a%0D%0Ab%09c%7F", "a%0D%0Ab%09c%7F"},
	}
	for _, tt := range tests {
		if got := EncodeHeaderValue(tt.in); got != tt.minimal {
			t.Errorf("EncodeHeaderValue(%q) = %q, want %q", tt.in, got, tt.minimal)
		}
		if got := EncodeHeaderValueAs(tt.in, HeaderPercent); got != tt.percent {
			t.Errorf("EncodeHeaderValueAs(%q, HeaderPercent) = %q, want %q", tt.in, got, tt.percent)
		}
		if got, _ := decodeHeaderValue(tt.minimal); got != tt.in {
			t.Errorf("decode(minimal %q) = %q, want %q", tt.minimal, got, tt.in)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	in := &Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Subject: "s", DataSchema: "http://x/s",
		Extensions: []Extension{{"a", "1"}, {"b", ""}}, Data: bytes.Repeat([]byte{0, 1, 2}, 100)}
	out, err := DecodeBinary(AppendBinary(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	assertSameEvent(t, in, out)
	for _, bad := range [][]byte{nil, {9}, {1, 5}, {1, 1, 200}} {
		if _, err := DecodeBinary(bad); err == nil {
			t.Errorf("DecodeBinary(%v) accepted corrupt input", bad)
		}
	}
}

func TestAppendJSONRoundTrip(t *testing.T) {
	for _, in := range []*Event{
		{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Data: []byte(`{"x":1}`)},
		{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", DataContentType: "application/octet-stream", Data: []byte{0, 255}},
		{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", Extensions: []Extension{{"e", "v"}}},
	} {
		out, err := ParseStructured(AppendJSON([]byte("prefix"), in)[len("prefix"):])
		if err != nil {
			t.Fatal(err)
		}
		assertSameEvent(t, in, out)
	}
}

// assertSameEvent compares attributes (extensions in any order) and data bytes.
func assertSameEvent(t *testing.T, want, got *Event) {
	t.Helper()
	if want.SpecVersion != got.SpecVersion || want.ID != got.ID || want.Source != got.Source || want.Type != got.Type ||
		want.Subject != got.Subject || want.Time != got.Time || want.DataSchema != got.DataSchema ||
		want.DataContentType != got.DataContentType || !bytes.Equal(want.Data, got.Data) {
		t.Fatalf("events differ:\nwant %+v\ngot  %+v", want, got)
	}
	if len(want.Extensions) != len(got.Extensions) {
		t.Fatalf("extensions: want %v, got %v", want.Extensions, got.Extensions)
	}
	for _, x := range want.Extensions {
		if v, ok := got.Get(x.Name); !ok || v != x.Value {
			t.Fatalf("extension %s = %q, want %q", x.Name, v, x.Value)
		}
	}
}
