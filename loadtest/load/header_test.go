package load

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/pacer"
)

// TestExtraHeaders: Options.Header reaches the target through the raw sender, net/http,
// and net/http over TLS.
func TestExtraHeaders(t *testing.T) {
	var ok, bad atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") == "Bearer abc" {
			ok.Add(1)
		} else {
			bad.Add(1)
		}
		w.WriteHeader(202)
	})
	plain, secure := httptest.NewServer(h), httptest.NewTLSServer(h)
	defer plain.Close()
	defer secure.Close()
	for _, tt := range []struct {
		name, url string
		std       bool
	}{{"raw", plain.URL, false}, {"std", plain.URL, true}, {"tls", secure.URL, false}} {
		ok.Store(0)
		bad.Store(0)
		_, err := Run(context.Background(), Options{Target: tt.url, Pacer: pacer.Constant{Rate: 100, Duration: 50 * time.Millisecond},
			Template: template(t, cevent.Binary), Connections: 2, StdClient: tt.std, Insecure: true,
			Header: [][2]string{{"Authorization", "Bearer abc"}}})
		if err != nil {
			t.Fatal(err)
		}
		if ok.Load() == 0 || bad.Load() != 0 {
			t.Errorf("%s: %d requests with the header, %d without", tt.name, ok.Load(), bad.Load())
		}
	}
}
