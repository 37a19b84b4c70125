package sluicetest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestBaseOf(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{in: "http://127.0.0.1:8080/default/default", want: "http://127.0.0.1:8080"},
		{in: "https://127.0.0.1:8443/ns/b", want: "https://127.0.0.1:8443"},
		{in: "http://127.0.0.1:8080", want: "http://127.0.0.1:8080"},
		{in: "127.0.0.1:8080/ns/b", err: true},
	} {
		got, err := BaseOf(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("BaseOf(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestMetric(t *testing.T) {
	const page = `# HELP sluice_events_accepted_total Events accepted.
# TYPE sluice_events_accepted_total counter
sluice_events_accepted_total{broker="a/b"} 3
sluice_events_accepted_total{broker="c/d"} 4.5
sluice_events_received_total{broker="a/b"} 100
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		prefix string
		want   float64
	}{
		{"sluice_events_accepted_total", 7.5},
		{`sluice_events_accepted_total{broker="a/b"}`, 3},
		{"sluice_events_received_total", 100},
		{"sluice_events_lost_total", 0},
	} {
		got, err := Metric(srv.URL, tc.prefix)
		if err != nil || got != tc.want {
			t.Errorf("Metric(%q) = %v, %v; want %v", tc.prefix, got, err, tc.want)
		}
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "sluice_x 1 2 three")
	}))
	defer broken.Close()
	if _, err := Metric(broken.URL, "sluice_x"); err == nil || !strings.Contains(err.Error(), "sluice_x") {
		t.Errorf("a sample that is not a number: err = %v, want one naming the line", err)
	}
	down := srv.URL
	srv.Close()
	if _, err := Metric(down, "sluice_events_accepted_total"); err == nil {
		t.Error("a closed server: no error")
	}
}

func TestWaitReady(t *testing.T) {
	ready := time.Now().Add(100 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if time.Now().Before(ready) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := WaitReady(srv.URL, 5*time.Second); err != nil {
		t.Fatalf("ready after 100 ms: %v", err)
	}
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer never.Close()
	if err := WaitReady(never.URL, 150*time.Millisecond); err == nil {
		t.Fatal("never ready: no error")
	}
}

// TestIngestURL: the first ingest URL is sent, trimmed; the output is read to its end,
// past later URLs and a line too long to scan, so that the writer never blocks.
func TestIngestURL(t *testing.T) {
	long := strings.Repeat("x", 100<<10) // beyond bufio.Scanner's 64 KiB line
	out := "sluice serving\ningest: http://127.0.0.1:8080/a/b \ningest: http://127.0.0.1:8080/c/d\n" + long + "\nmore\n"
	r, w := io.Pipe()
	written := make(chan error, 1)
	go func() { _, err := io.WriteString(w, out); w.Close(); written <- err }()
	select {
	case u := <-IngestURL(r):
		if u != "http://127.0.0.1:8080/a/b" {
			t.Errorf("IngestURL = %q, want the first URL, trimmed", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ingest URL")
	}
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the output was not read to its end: the writer is blocked")
	}
}
