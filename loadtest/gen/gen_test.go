package gen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// vegetaTarget is the shape vegeta decodes with -format=json (lib/targets.go).
type vegetaTarget struct {
	Method string              `json:"method"`
	URL    string              `json:"url"`
	Body   []byte              `json:"body"` // base64 in JSON
	Header map[string][]string `json:"header"`
}

func TestWriteVegetaTargets(t *testing.T) {
	data := []byte(`{"hello":"world"}`)
	tests := []struct {
		name                 string
		typ, source          string
		wantType, wantSource string
	}{
		{"defaults", "", "", "io.triggermesh.perf.drill", "sluice.loadkit"},
		{"custom", "com.example.ping", "/me", "com.example.ping", "/me"},
		// Values travel as written but for what cannot travel in a header value
		// (event.EncodeHeaderValue): control characters, spaces at the ends, "%XX".
		{"encoded", "café ping\r\n", " /a \"b\" %41", "café ping%0D%0A", "%20/a \"b\" %2541"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			n, err := Write(context.Background(), &out, Options{URL: "http://127.0.0.1:9/x", Data: data, Type: tt.typ, Source: tt.source, Run: "r1", Count: 1000})
			if err != nil || n != 1000 {
				t.Fatalf("Write = %d, %v", n, err)
			}
			dec := json.NewDecoder(&out)
			ids := map[string]bool{}
			for i := 0; ; i++ {
				var tg vegetaTarget
				if err := dec.Decode(&tg); errors.Is(err, io.EOF) {
					if i != 1000 {
						t.Fatalf("decoded %d targets, want 1000", i)
					}
					break
				} else if err != nil {
					t.Fatalf("line %d: %v", i, err)
				}
				h := func(k string) string {
					if v := tg.Header[k]; len(v) == 1 {
						return v[0]
					}
					t.Fatalf("line %d: header %s = %v", i, k, tg.Header[k])
					return ""
				}
				if tg.Method != "POST" || tg.URL != "http://127.0.0.1:9/x" || !bytes.Equal(tg.Body, data) {
					t.Fatalf("line %d: %+v", i, tg)
				}
				if h("Ce-Specversion") != "1.0" || h("Ce-Type") != tt.wantType || h("Ce-Source") != tt.wantSource ||
					h("Content-Type") != "application/json" || h("Ce-Sluicerun") != "r1" {
					t.Fatalf("line %d: headers %v", i, tg.Header)
				}
				id := h("Ce-Id")
				if ids[id] {
					t.Fatalf("duplicate ce-id %s", id)
				}
				ids[id] = true
			}
		})
	}
}

type closedWriter struct{ after int }

func (c *closedWriter) Write(p []byte) (int, error) {
	if c.after <= 0 {
		return 0, io.ErrClosedPipe
	}
	c.after--
	return len(p), nil
}

func TestWriteStopsCleanly(t *testing.T) {
	if _, err := Write(context.Background(), &closedWriter{after: 3}, Options{URL: "http://x/", Run: "r"}); err != nil {
		t.Errorf("closed pipe: err = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, io.Discard, Options{URL: "http://x/", Run: "r"}); err != nil {
		t.Errorf("cancelled: err = %v, want nil", err)
	}
}
