package receive

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func post(t testing.TB, url, ct string, headers map[string]string, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", ct)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func binary(run string, seq int, sent time.Time) map[string]string {
	return map[string]string{"Ce-Specversion": "1.0", "Ce-Id": fmt.Sprintf("%s-%d", run, seq), "Ce-Type": "t", "Ce-Source": "s",
		"Ce-Sluicerun": run, "Ce-Sluiceseq": strconv.Itoa(seq), "Ce-Sluicesent": strconv.FormatInt(sent.UnixNano(), 10)}
}

func structured(run string, seq int, sent time.Time) string {
	return fmt.Sprintf(`{"specversion":"1.0","id":"%s-%d","type":"t","source":"s","sluicerun":%q,"sluiceseq":"%d","sluicesent":"%d","data":{"a":1}}`,
		run, seq, run, seq, sent.UnixNano())
}

func TestReceiverAccounting(t *testing.T) {
	sent := time.Now().Add(-50 * time.Millisecond) // e2e latency ≥ 50 ms
	tests := []struct {
		name               string
		send               func(t *testing.T, url string)
		events, dups, lost uint64
		invalid            uint64
		minLatency         time.Duration
	}{
		{"binary in order", func(t *testing.T, url string) {
			for i := 0; i < 10; i++ {
				post(t, url, "application/json", binary("a", i, sent), `{}`)
			}
		}, 10, 0, 0, 0, 50 * time.Millisecond},
		{"binary reordered with gaps and duplicates", func(t *testing.T, url string) {
			for _, i := range []int{3, 0, 1, 1, 7, 3, 5} {
				post(t, url, "application/json", binary("b", i, sent), `{}`)
			}
		}, 5, 2, 3, 0, 50 * time.Millisecond}, // seen 0 1 3 5 7: lost 2 4 6
		{"two runs", func(t *testing.T, url string) {
			post(t, url, "application/json", binary("x", 0, sent), `{}`)
			post(t, url, "application/json", binary("x", 2, sent), `{}`)
			post(t, url, "application/json", binary("y", 0, sent), `{}`)
			post(t, url, "application/json", binary("y", 1, sent), `{}`)
		}, 4, 0, 1, 0, 50 * time.Millisecond},
		{"structured and batch", func(t *testing.T, url string) {
			post(t, url, "application/cloudevents+json", nil, structured("s", 0, sent))
			post(t, url, "application/cloudevents-batch+json", nil, "["+structured("s", 1, sent)+","+structured("s", 2, sent)+","+structured("s", 1, sent)+"]")
		}, 3, 1, 0, 0, 50 * time.Millisecond},
		{"not CloudEvents", func(t *testing.T, url string) {
			if c := post(t, url, "application/json", nil, `{}`); c != http.StatusBadRequest {
				t.Errorf("plain JSON answered %d, want 400", c)
			}
			if c := post(t, url, "application/cloudevents+json", nil, `{"nope":`); c != http.StatusBadRequest {
				t.Errorf("broken JSON answered %d, want 400", c)
			}
		}, 0, 0, 0, 2, 0},
		{"sequence numbers past the bound", func(t *testing.T, url string) {
			for _, seq := range []int{1 << 32, 1 << 62} {
				if c := post(t, url, "application/json", binary("big", seq, sent), `{}`); c != http.StatusBadRequest {
					t.Errorf("sluiceseq %d answered %d, want 400", seq, c)
				}
			}
			post(t, url, "application/json", binary("big", 1, sent), `{}`)
		}, 1, 0, 1, 2, 50 * time.Millisecond}, // seen 1: lost 0
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(Options{})
			srv := httptest.NewServer(r)
			defer srv.Close()
			tt.send(t, srv.URL)
			rep := r.Report()
			if rep.Events != tt.events || rep.Duplicates != tt.dups || rep.Lost != tt.lost || rep.Invalid != tt.invalid {
				t.Errorf("events %d dups %d lost %d invalid %d; want %d %d %d %d",
					rep.Events, rep.Duplicates, rep.Lost, rep.Invalid, tt.events, tt.dups, tt.lost, tt.invalid)
			}
			if rep.Latency.Min < tt.minLatency {
				t.Errorf("e2e min latency %v, want ≥ %v", rep.Latency.Min, tt.minLatency)
			}
		})
	}
}

func TestFaultInjectionAndMetrics(t *testing.T) {
	r := New(Options{FailRatio: 1, FailStatus: 503, DelayMin: 20 * time.Millisecond, DelayMax: 20 * time.Millisecond})
	srv := httptest.NewServer(r)
	defer srv.Close()
	start := time.Now()
	if c := post(t, srv.URL, "application/json", binary("f", 0, start), `{}`); c != 503 {
		t.Errorf("status %d, want 503", c)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Errorf("answered before the 20ms delay")
	}
	if rep := r.Report(); rep.Rejected != 1 || rep.Events != 0 {
		t.Errorf("rejected %d events %d, want 1 0", rep.Rejected, rep.Events)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !bytes.Contains(b, []byte("sluice_receive_rejected_total 1")) {
		t.Errorf("metrics lack the rejected counter:\n%s", b)
	}
}

// TestRefusing: while refusing, every event gets 503 and is not counted as received;
// after SetRefusing(false) the same event is accepted.
func TestRefusing(t *testing.T) {
	r := New(Options{})
	srv := httptest.NewServer(r)
	defer srv.Close()
	r.SetRefusing(true)
	for range 3 {
		if c := post(t, srv.URL, "application/json", binary("b", 0, time.Now()), `{}`); c != 503 {
			t.Errorf("refusing: status %d, want 503", c)
		}
	}
	r.SetRefusing(false)
	if c := post(t, srv.URL, "application/json", binary("b", 0, time.Now()), `{}`); c != 202 {
		t.Errorf("open: status %d, want 202", c)
	}
	if rep := r.Report(); rep.Refused != 3 || rep.Events != 1 || rep.Duplicates != 0 {
		t.Errorf("refused %d events %d duplicates %d, want 3 1 0", rep.Refused, rep.Events, rep.Duplicates)
	}
}

func BenchmarkHandlerBinary(b *testing.B) {
	r := New(Options{})
	body := bytes.Repeat([]byte("x"), 2048)
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	for k, v := range binary("bench", 0, time.Now()) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	for i := 0; b.Loop(); i++ {
		req.Header["Ce-Sluiceseq"][0] = strconv.Itoa(i)
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.ServeHTTP(w, req)
	}
}

func TestReceiverRunsBounded(t *testing.T) {
	r := New(Options{})
	send := func(run string) int {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range binary(run, 0, time.Now()) {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Code
	}
	for i := range maxRuns {
		if c := send(strconv.Itoa(i)); c != http.StatusAccepted && c != http.StatusOK {
			t.Fatalf("run %d answered %d", i, c)
		}
	}
	if c := send("one-too-many"); c != http.StatusBadRequest {
		t.Errorf("run %d answered %d, want 400", maxRuns+1, c)
	}
	if c := send("0"); c == http.StatusBadRequest {
		t.Error("a run already known was refused")
	}
	if rep := r.Report(); rep.Events != maxRuns || rep.Duplicates != 1 || rep.Invalid != 1 {
		t.Errorf("events %d duplicates %d invalid %d; want %d 1 1", rep.Events, rep.Duplicates, rep.Invalid, maxRuns)
	}
}
