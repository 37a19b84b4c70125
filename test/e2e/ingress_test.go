package e2e

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func samplePayload(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../../testdata/sample-ce-data.json")
	if err != nil {
		t.Fatalf("sample payload: %v", err)
	}
	return data
}

// TestBinaryAndStructuredByteForByte sends one event in each mode and checks the
// subscriber receives the data bytes and every attribute, extensions included, unchanged
// (in binary mode), and that the broker's loop-guard extension is not leaked.
func TestBinaryAndStructuredByteForByte(t *testing.T) {
	sub := newSubscriber(t, nil)
	cfg := writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL}))
	b := startBroker(t, "--config", cfg)
	payload := samplePayload(t)
	ingest := b.base + "/default/default"

	headers := ceHeaders("bin-1", "io.triggermesh.perf.drill")
	headers["ce-subject"] = "caf%C3%A9 %25"
	headers["ce-time"] = "2026-11-22T10:00:00.5Z"
	headers["ce-dataschema"] = "https://example.com/schema"
	headers["ce-partitionkey"] = "k-1"
	headers["ce-myext"] = "x y"
	if status, body := postBinary(t, ingest, headers, payload); status != http.StatusAccepted {
		t.Fatalf("binary: %d %s", status, body)
	}

	data := `{"n": [1, 2, 3], "s": "é"}`
	structured := `{"specversion":"1.0","id":"st-1","source":"/e2e","type":"t.structured","datacontenttype":"application/json","count":7,"data":` + data + `}`
	if status, body := postBinary(t, ingest, map[string]string{"Content-Type": "application/cloudevents+json"}, []byte(structured)); status != http.StatusAccepted {
		t.Fatalf("structured: %d %s", status, body)
	}
	bin := []byte{0, 1, 2, 255}
	structured64 := `{"specversion":"1.0","id":"st-2","source":"/e2e","type":"t.b64","datacontenttype":"application/octet-stream","data_base64":"` + base64.StdEncoding.EncodeToString(bin) + `"}`
	if status, body := postBinary(t, ingest, map[string]string{"Content-Type": "application/cloudevents+json"}, []byte(structured64)); status != http.StatusAccepted {
		t.Fatalf("structured base64: %d %s", status, body)
	}

	got := sub.waitFor(t, 3, 10*time.Second)
	byID := map[string]received{}
	for _, r := range got {
		byID[r.Header.Get("Ce-Id")] = r
	}
	r := byID["bin-1"]
	if !bytes.Equal(r.Body, payload) {
		t.Errorf("binary data changed: got %d bytes, want %d", len(r.Body), len(payload))
	}
	for k, v := range headers {
		// Values may be encoded differently (the sender percent-encoded what the broker
		// sends as it is); compare what they mean.
		want := headerMeaning(v)
		if got := headerMeaning(r.Header.Get(k)); got != want {
			t.Errorf("binary %s = %q, want %q", k, got, want)
		}
	}
	for _, r := range got {
		for k := range r.Header {
			if strings.EqualFold(k, "ce-knativebrokerttl") {
				t.Errorf("the loop-guard extension reached the subscriber")
			}
		}
	}

	r = byID["st-1"]
	if string(r.Body) != data {
		t.Errorf("structured data = %q, want %q", r.Body, data)
	}
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-source": "/e2e", "ce-type": "t.structured", "ce-count": "7", "Content-Type": "application/json"} {
		if got := r.Header.Get(k); got != v {
			t.Errorf("structured %s = %q, want %q", k, got, v)
		}
	}
	if r := byID["st-2"]; !bytes.Equal(r.Body, bin) || r.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("base64 data = %v (%s), want %v", r.Body, r.Header.Get("Content-Type"), bin)
	}
}

// TestBatchIngest sends a batch of three events; each reaches the subscriber.
func TestBatchIngest(t *testing.T) {
	sub := newSubscriber(t, nil)
	b := startBroker(t, "--config", writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL})))
	batch := `[{"specversion":"1.0","id":"b1","source":"/e2e","type":"t","data":1},
	           {"specversion":"1.0","id":"b2","source":"/e2e","type":"t","data":"two"},
	           {"specversion":"1.0","id":"b3","source":"/e2e","type":"t","data":{"three":3}}]`
	status, body := postBinary(t, b.base+"/default/default", map[string]string{"Content-Type": "application/cloudevents-batch+json"}, []byte(batch))
	if status != http.StatusAccepted {
		t.Fatalf("batch: %d %s", status, body)
	}
	got := sub.waitFor(t, 3, 10*time.Second)
	want := map[string]string{"b1": "1", "b2": `"two"`, "b3": `{"three":3}`}
	for _, r := range got {
		if w := want[r.Header.Get("Ce-Id")]; string(r.Body) != w {
			t.Errorf("%s data = %q, want %q", r.Header.Get("Ce-Id"), r.Body, w)
		}
	}
}

// TestErrorCodes demonstrates every rejection the ingress makes, each with a reason.
func TestErrorCodes(t *testing.T) {
	sub := newSubscriber(t, nil)
	b := startBroker(t, "--config", writeConfig(t, brokerYAML("", [3]string{"all", "", sub.URL})), "--max-event-bytes", "1KiB")
	ingest := b.base + "/default/default"
	big := bytes.Repeat([]byte("x"), 2000)
	tests := []struct {
		name       string
		method     string
		url        string
		headers    map[string]string
		body       []byte
		wantStatus int
		wantBody   string
		wantHeader [2]string
	}{
		{"valid", "POST", ingest, ceHeaders("1", "t"), []byte(`{}`), 202, "", [2]string{}},
		{"missing id", "POST", ingest, map[string]string{"ce-specversion": "1.0", "ce-source": "/s", "ce-type": "t"}, nil, 400, "id: missing", [2]string{}},
		{"specversion 0.3", "POST", ingest, map[string]string{"ce-specversion": "0.3", "ce-id": "1", "ce-source": "/s", "ce-type": "t"}, nil, 400, `"0.3" is not supported`, [2]string{}},
		{"bad extension name", "POST", ingest, mergeHeaders(ceHeaders("1", "t"), "ce-bad_name", "x"), nil, 400, "bad_name", [2]string{}},
		{"bad time", "POST", ingest, mergeHeaders(ceHeaders("1", "t"), "ce-time", "noon"), nil, 400, "time", [2]string{}},
		{"invalid UTF-8 after percent-decoding", "POST", ingest, mergeHeaders(ceHeaders("1", "t"), "ce-subject", "%FF%FE"), nil, 400, "UTF-8", [2]string{}},
		{"structured not json", "POST", ingest, map[string]string{"Content-Type": "application/cloudevents+json"}, []byte("{"), 400, "JSON", [2]string{}},
		{"unknown broker", "POST", b.base + "/nope/nope", ceHeaders("1", "t"), nil, 404, "no broker", [2]string{}},
		{"GET", "GET", ingest, nil, nil, 405, "not allowed", [2]string{"Allow", "POST, OPTIONS"}},
		{"PUT", "PUT", ingest, nil, nil, 405, "not allowed", [2]string{"Allow", "POST, OPTIONS"}},
		{"OPTIONS", "OPTIONS", ingest, nil, nil, 200, "", [2]string{"Allow", "POST, OPTIONS"}},
		{"too large", "POST", ingest, ceHeaders("1", "t"), big, 413, "size limit", [2]string{}},
		{"xml structured", "POST", ingest, map[string]string{"Content-Type": "application/cloudevents+xml"}, []byte("<e/>"), 415, "only", [2]string{}},
		{"ttl exhausted", "POST", ingest, mergeHeaders(ceHeaders("1", "t"), "ce-knativebrokerttl", "0"), nil, 400, "TTL", [2]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url, bytes.NewReader(tt.body))
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, tt.wantStatus, buf.String())
			}
			if !strings.Contains(buf.String(), tt.wantBody) {
				t.Errorf("body %q does not say %q", buf.String(), tt.wantBody)
			}
			if strings.Count(strings.TrimSpace(buf.String()), "\n") > 0 {
				t.Errorf("reason is not one line: %q", buf.String())
			}
			if tt.wantHeader[0] != "" && resp.Header.Get(tt.wantHeader[0]) != tt.wantHeader[1] {
				t.Errorf("%s = %q, want %q", tt.wantHeader[0], resp.Header.Get(tt.wantHeader[0]), tt.wantHeader[1])
			}
		})
	}
	if n := b.metric(`sluice_requests_rejected_total{broker="default/default",reason="invalid"}`); n < 6 {
		t.Errorf("rejected{invalid} = %v, want ≥ 6", n)
	}
}

func mergeHeaders(h map[string]string, k, v string) map[string]string {
	h[k] = v
	return h
}
