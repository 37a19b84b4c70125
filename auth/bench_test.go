package auth

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/broker"
	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
)

// BenchmarkIngressAuth measures the broker's ingress for one 1 KiB binary event (no
// trigger matches: the ingress path alone) without an authorizer, and with one checking
// a bearer token (remembered after its first verification) against the broker's
// audience and an EventPolicy with a filter. broker's BenchmarkIngressBinary is the same
// path without the authorizer.
func BenchmarkIngressAuth(b *testing.B) {
	is := newIssuer(b)
	file := filepath.Join(b.TempDir(), "jwks.json")
	if err := os.WriteFile(file, is.jwks, 0o644); err != nil {
		b.Fatal(err)
	}
	v, err := NewVerifier(context.Background(), is.url, KeySource{JWKSFile: file})
	if err != nil {
		b.Fatal(err)
	}
	cfg := loadConfig(b, manifests+`---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: shop}
spec: {broker: orders, filter: {attributes: {type: never.matches}}, subscriber: {uri: "http://127.0.0.1:9/"}}
`)
	tok := is.token(b, "system:serviceaccount:shop:trusted-app", []string{"eventing.knative.dev/broker/shop/orders"}, time.Hour)
	for _, bc := range []struct {
		name string
		auth bool
	}{{"off", false}, {"token+policy", true}} {
		b.Run(bc.name, func(b *testing.B) {
			budget := memory.NewBudget(64 << 20)
			opts := []broker.Option{
				broker.WithChannelOpener(func(context.Context, config.Broker) (channel.Channel, error) {
					return memory.New(memory.WithBudget(budget)), nil
				}),
				broker.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
			}
			if bc.auth {
				a, err := New(WithVerifier(v), WithDefaultMode(DenyAll))
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, broker.WithAuthorizer(a))
			}
			s, err := broker.NewServer(opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			if err := s.Apply(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
			h := s.Handler()
			body := bytes.Repeat([]byte("x"), 1024)
			req := httptest.NewRequest(http.MethodPost, "/shop/orders", nil)
			for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "1", "Ce-Source": "/bench",
				"Ce-Type": "com.github.push", "Content-Type": "application/octet-stream", "Authorization": "Bearer " + tok} {
				req.Header.Set(k, v)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := *req
				r.Body = io.NopCloser(bytes.NewReader(body))
				r.ContentLength = int64(len(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, &r)
				if w.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
