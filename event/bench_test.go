package event

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

func benchPayload(b *testing.B) []byte {
	b.Helper()
	data, err := os.ReadFile("../testdata/sample-ce-data.json")
	if err != nil {
		b.Fatalf("sample payload: %v", err)
	}
	return data
}

func benchRequest(data []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/ns/b", bytes.NewReader(data))
	for k, v := range map[string]string{
		"ce-specversion": "1.0", "ce-id": "run-123456", "ce-source": "sluice.loadkit", "ce-type": "io.triggermesh.perf.drill",
		"ce-sluicerun": "abc123", "ce-sluiceseq": "123456", "ce-sluicesent": "1763770000000000000", "Content-Type": "application/json",
	} {
		r.Header.Set(k, v)
	}
	return r
}

// BenchmarkReadRequest parses a binary-mode request with a 2 KiB body, as ingress does.
// Compare BenchmarkReadRequestSDK: the same request through cloudevents/sdk-go's HTTP
// binding, which Sluice does not use on the hot path (it is slower, and it
// does not percent-decode header values or reject invalid extension names).
func BenchmarkReadRequest(b *testing.B) {
	data := benchPayload(b)
	r := benchRequest(data)
	rd := bytes.NewReader(data)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		rd.Reset(data)
		r.Body = nopCloser{rd}
		if _, err := ReadRequest(r, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadRequestSDK(b *testing.B) {
	data := benchPayload(b)
	r := benchRequest(data)
	rd := bytes.NewReader(data)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		rd.Reset(data)
		r.Body = nopCloser{rd}
		e, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteHeaders writes a delivery's binary-mode headers.
func BenchmarkWriteHeaders(b *testing.B) {
	evs, err := Parse(benchRequest(nil).Header, benchPayload(b))
	if err != nil {
		b.Fatal(err)
	}
	h := make(http.Header, 16)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		clear(h)
		WriteHeaders(h, evs[0])
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// BenchmarkAppendJSON encodes one event with 2 KiB of JSON data in the JSON format, as
// each event of a batched delivery is. Its /validate sub-benchmarks compare the JSON
// validity check it makes (validJSON, fastjson) with encoding/json's.
func BenchmarkAppendJSON(b *testing.B) {
	data := benchPayload(b)
	e := &Event{SpecVersion: "1.0", ID: "run-123456", Source: "sluice.loadkit", Type: "io.triggermesh.perf.drill",
		DataContentType: "application/json", Data: data}
	b.Run("event", func(b *testing.B) {
		buf := make([]byte, 0, 8<<10)
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for range b.N {
			buf = AppendJSON(buf[:0], e)
		}
	})
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"validate/fastjson", validJSON}, {"validate/encoding-json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for range b.N {
				if !v.valid(data) {
					b.Fatal("the sample is not valid JSON")
				}
			}
		})
	}
}

// BenchmarkHeaderKeys looks up the header keys of the load kit's extensions and the
// knative ones, both ways, as ingress (name) and delivery (key) do per event.
func BenchmarkHeaderKeys(b *testing.B) {
	names := []string{"sluicerun", "sluiceseq", "sluicesent", "knativearrivaltime", "knativebrokerttl"}
	hdrs := make([]string, len(names))
	for i, n := range names {
		hdrs[i] = keys.key(n)
	}
	b.ReportAllocs()
	for b.Loop() {
		for i, n := range names {
			if keys.key(n) != hdrs[i] || keys.name(hdrs[i]) != n {
				b.Fatal("wrong key")
			}
		}
	}
}

// BenchmarkParseAttributes parses an event of MaxAttributes attributes (short
// extensions) in each mode, and a reply of the same headers: the most attributes one
// event may make a parser look at.
func BenchmarkParseAttributes(b *testing.B) {
	const exts = MaxAttributes - 5
	binaryH := manyAttrHeaders(exts)
	structured := manyAttrJSON(exts)
	batch := append(append([]byte{'['}, structured...), ']')
	for _, bm := range []struct {
		name string
		h    http.Header
		body []byte
	}{
		{"binary", binaryH, []byte("hi")},
		{"structured", http.Header{"Content-Type": {MediaTypeStructured}}, structured},
		{"batch", http.Header{"Content-Type": {MediaTypeBatch}}, batch},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				evs, err := Parse(bm.h, bm.body)
				if err != nil || len(evs[0].Extensions) != exts {
					b.Fatalf("%v", err)
				}
			}
		})
	}
	b.Run("reply", func(b *testing.B) {
		b.ReportAllocs()
		body := []byte("hi")
		rd := bytes.NewReader(body)
		resp := &http.Response{StatusCode: http.StatusOK, Header: binaryH, ContentLength: int64(len(body))}
		for b.Loop() {
			rd.Reset(body)
			resp.Body = nopCloser{rd}
			if _, err := ReadResponse(resp, 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
}
