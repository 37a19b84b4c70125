package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/delivery"
	"github.com/sluice-broker/sluice/event"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

func TestStampTTL(t *testing.T) {
	tests := []struct {
		in      string // "" = absent
		want    string
		wantErr string
	}{
		{"", "255", ""},
		{"10", "10", ""},
		{"1", "1", ""},
		{"0", "", "TTL exhausted"},
		{"-3", "", "TTL exhausted"},
		{"ten", "", "not an integer"},
		{"255", "255", ""},
		{"256", "255", ""},
		{"2147483648", "255", ""},
		{"99999999999999999999999", "255", ""},
		{"-99999999999999999999999", "", "TTL exhausted"},
	}
	for _, tt := range tests {
		e := &event.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t"}
		if tt.in != "" {
			e.Set(delivery.ExtTTL, tt.in)
		}
		err := stampTTL(e)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ttl %q: err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if v, _ := e.Get(delivery.ExtTTL); err != nil || v != tt.want {
			t.Errorf("ttl %q: got %q, %v; want %q", tt.in, v, err, tt.want)
		}
	}
}

// TestApplyRoutesAndRetires checks ingest routes by filter, a reload adds a trigger, and
// a removed trigger stops receiving while the one that stays keeps everything.
func TestApplyRoutesAndRetires(t *testing.T) {
	var gotA, gotB atomic.Int64
	subA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { gotA.Add(1); w.WriteHeader(202) }))
	defer subA.Close()
	subB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { gotB.Add(1); w.WriteHeader(202) }))
	defer subB.Close()
	s := newTestServer(t, nil, WithShutdownTimeout(5*time.Second))
	ctx := context.Background()
	one := plainBroker() + triggerDoc("a", "type.a", subA.URL)
	if err := s.Apply(ctx, loadConfig(t, one)); err != nil {
		t.Fatal(err)
	}
	send := func(typ string) int {
		req := httptest.NewRequest(http.MethodPost, "/ns/b", strings.NewReader("{}"))
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "1", "Ce-Source": "/s", "Ce-Type": typ} {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	waitFor := func(c *atomic.Int64, n int64) {
		t.Helper()
		sluicetest.Eventually(t, 5*time.Second, fmt.Sprintf("%d deliveries", n), func() bool { return c.Load() >= n })
	}
	if send("type.a") != 202 || send("type.b") != 202 {
		t.Fatal("ingest refused")
	}
	waitFor(&gotA, 1)
	if err := s.Apply(ctx, loadConfig(t, one+triggerDoc("b", "type.b", subB.URL))); err != nil {
		t.Fatal(err)
	}
	send("type.b")
	waitFor(&gotB, 1)
	if err := s.Apply(ctx, loadConfig(t, one)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	send("type.b")
	send("type.a")
	waitFor(&gotA, 2)
	time.Sleep(50 * time.Millisecond)
	if gotB.Load() != 1 {
		t.Errorf("trigger b received %d after its removal, want 1 in all", gotB.Load())
	}
	if left := s.Shutdown(ctx); left != 0 {
		t.Errorf("Shutdown left %d undelivered", left)
	}
	if code := send("type.a"); code != http.StatusServiceUnavailable {
		t.Errorf("after Shutdown: %d, want 503", code)
	}
}

func TestApplyChannelErrors(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	kafkaBroker := fmt.Sprintf(brokerDoc, ", annotations: {sluice.dev/channel: kafka}")
	err := s.Apply(ctx, loadConfig(t, kafkaBroker))
	if err == nil || !strings.Contains(err.Error(), `broker ns/b: channel backend "kafka" is not configured`) {
		t.Fatalf("kafka the opener cannot open: err = %v", err)
	}
	if err := s.Apply(ctx, loadConfig(t, plainBroker())); err != nil {
		t.Fatal(err)
	}
	err = s.Apply(ctx, loadConfig(t, fmt.Sprintf(brokerDoc, ", annotations: {sluice.dev/channel: jetstream}")))
	if err == nil || !strings.Contains(err.Error(), "needs a restart") {
		t.Fatalf("changing the backend: err = %v", err)
	}
	s.Shutdown(ctx)
	if err := s.Apply(ctx, loadConfig(t, plainBroker())); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Apply after Shutdown: err = %v, want ErrShutdown", err)
	}
}

func TestNewServerOptions(t *testing.T) {
	open := memoryOpener(nil)
	tests := []struct {
		opts []Option
		want string // "" = valid
	}{
		{[]Option{WithChannelOpener(open)}, ""},
		{nil, "WithChannelOpener is required"},
		{[]Option{WithChannelOpener(open), WithMaxEventBytes(0)}, "WithMaxEventBytes(0)"},
		{[]Option{WithChannelOpener(open), WithShutdownTimeout(-time.Second)}, "WithShutdownTimeout(-1s)"},
		{[]Option{WithChannelOpener(open), WithPublishTimeout(0)}, "WithPublishTimeout(0s)"},
		{[]Option{WithChannelOpener(open), WithMaxInFlight(0)}, "WithMaxInFlight(0)"},
		{[]Option{WithChannelOpener(open), WithLogger(nil)}, "WithLogger(nil)"},
	}
	for _, tt := range tests {
		_, err := NewServer(tt.opts...)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("valid options: %v", err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("err = %v, want one naming %s", err, tt.want)
		}
	}
}
