package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/channel/memory"
	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/overload"
)

// shareOpener opens memory channels drawing on a share of root per namespace, as
// channel/registry does with WithNamespaceShare.
func shareOpener(root *memory.Budget, share int64) ChannelOpener {
	var mu sync.Mutex
	shares := map[string]*memory.Budget{}
	return func(_ context.Context, b config.Broker) (channel.Channel, error) {
		mu.Lock()
		defer mu.Unlock()
		s := shares[b.Namespace]
		if s == nil {
			s = root.Share(share)
			shares[b.Namespace] = s
		}
		return memory.New(memory.WithBudget(s)), nil
	}
}

// sendLoad posts events of size bytes to url at perSec for d, and returns each
// request's status and latency.
func sendLoad(t *testing.T, c *http.Client, url, prefix string, size, perSec int, d time.Duration) (statuses map[int]int, lat []time.Duration) {
	t.Helper()
	statuses = map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	body := bytes.Repeat([]byte("x"), size)
	tick := time.NewTicker(time.Second / time.Duration(perSec))
	defer tick.Stop()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		<-tick.C
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Ce-Specversion", "1.0")
			req.Header.Set("Ce-Id", prefix+strconv.Itoa(i))
			req.Header.Set("Ce-Source", "/fair")
			req.Header.Set("Ce-Type", "fair")
			start := time.Now()
			resp, err := c.Do(req)
			took := time.Since(start)
			status := 0
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
			}
			mu.Lock()
			statuses[status]++
			if status == http.StatusAccepted {
				lat = append(lat, took)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses, lat
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// TestFairShares floods namespace a at 3× its share while namespace b sends at a steady
// rate, in three rounds of 1.5 s of b alone then 1.5 s of b beside a's flood. a's share is its broker's sluice.dev/max-rate (200 events/s) and half the memory
// budget; its subscriber fails every delivery, so what it is allowed in stays queued.
// b loses nothing: every event is accepted and delivered. b's p99 ingress latency alone
// and beside a's flood is logged, not judged: the machine's load sets it.
func TestFairShares(t *testing.T) {
	var gotB atomic.Int64
	subA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // a's events stay queued, retried
	}))
	defer subA.Close()
	subB := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		gotB.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer subB.Close()
	const limit = 2 << 20 // 2 MiB, 1 MiB a namespace
	s, err := NewServer(WithChannelOpener(shareOpener(memory.NewBudget(limit), limit/2)), WithLogger(discardLogger()),
		WithShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	}()
	cfgYAML := ""
	for _, ns := range []struct {
		name, rate, sub string
	}{{"a", "200", subA.URL}, {"b", "400", subB.URL}} {
		cfgYAML += fmt.Sprintf(`---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: b, namespace: %s, annotations: {sluice.dev/max-rate: "%s"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: %s}
spec:
  broker: b
  subscriber: {uri: "%s"}
  delivery: {retry: 20, backoffPolicy: linear, backoffDelay: PT1S}
`, ns.name, ns.rate, ns.name, ns.sub)
	}
	if err := s.Apply(context.Background(), loadConfig(t, cfgYAML)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	// a and b are different clients, with connections of their own.
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: 10 * time.Second}
	ca := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: 10 * time.Second}
	const size, rateB, rateA, d = 4 << 10, 200, 600, 1500 * time.Millisecond

	// b alone and b beside a's flood (a at 3× its rate share and, queued, past its
	// memory share), alternated three times so that the machine's other load, which
	// drifts over seconds, falls on both.
	alone, with, flood := map[int]int{}, map[int]int{}, map[int]int{}
	var latAlone, latWith []time.Duration
	add := func(into, from map[int]int) {
		for k, v := range from {
			into[k] += v
		}
	}
	for range 3 {
		st, lat := sendLoad(t, c, srv.URL+"/b/b", "alone-", size, rateB, d)
		add(alone, st)
		latAlone = append(latAlone, lat...)
		var fl map[int]int
		var wg sync.WaitGroup
		wg.Go(func() { fl, _ = sendLoad(t, ca, srv.URL+"/a/b", "a-", size, rateA, d) })
		st, lat = sendLoad(t, c, srv.URL+"/b/b", "with-", size, rateB, d)
		wg.Wait()
		add(with, st)
		add(flood, fl)
		latWith = append(latWith, lat...)
	}

	sentB := 0
	for st, n := range alone {
		sentB += n
		if st != http.StatusAccepted {
			t.Errorf("b alone: %d answers %d", n, st)
		}
	}
	for st, n := range with {
		sentB += n
		if st != http.StatusAccepted {
			t.Errorf("b beside a's flood: %d answers %d; want every event accepted", n, st)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for gotB.Load() < int64(sentB) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := gotB.Load(); got != int64(sentB) {
		t.Errorf("b's subscriber got %d of %d events", got, sentB)
	}
	if flood[http.StatusTooManyRequests] == 0 {
		t.Errorf("a at 3× its share: %v; want what exceeds it answered 429", flood)
	}
	// a's accepted events are bounded by its memory share (1 MiB of 4 KiB events: ~250;
	// its subscriber settles none) and its bucket (200/s for 4.5 s plus a burst of 200).
	if a := flood[http.StatusAccepted]; a > 300 {
		t.Errorf("a got %d events in; its memory share holds about 250", a)
	}
	pAlone, pWith := p99(latAlone), p99(latWith)
	t.Logf("b: p99 %v alone, %v beside a's flood; a: %v", pAlone, pWith, flood)
}

// TestBatchOverRateIs413: a batch of more events than a broker's sluice.dev/max-rate
// ever lets in at once is answered 413 naming the limit, not a 429 its client would
// retry forever; a batch within it is let in.
func TestBatchOverRateIs413(t *testing.T) {
	sub := newRecorder(t)
	s := newTestServer(t, memory.NewBudget(1<<20))
	cfg := fmt.Sprintf(brokerDoc, `, annotations: {sluice.dev/max-rate: "5"}`) + triggerDoc("all", "t", sub.URL)
	if err := s.Apply(context.Background(), loadConfig(t, cfg)); err != nil {
		t.Fatal(err)
	}
	batch := func(n int) string {
		evs := make([]string, n)
		for i := range evs {
			evs[i] = `{"specversion":"1.0","id":"e` + strconv.Itoa(i) + `","source":"/test","type":"t","data":{"n":1}}`
		}
		return "[" + strings.Join(evs, ",") + "]"
	}
	h := s.Handler()
	for _, tc := range []struct {
		name   string
		events int
		status int
		body   string
	}{
		{"over the rate at once", 6, 413, "batch of 6 events is more than the rate limit of /ns/b (5 events/s, sluice.dev/max-rate) ever lets in at once (5 events): send smaller batches\n"},
		{"within it", 5, 202, ""},
	} {
		rec := post(h, "POST", "/ns/b", map[string]string{"Content-Type": "application/cloudevents-batch+json"}, batch(tc.events))
		if rec.Code != tc.status || rec.Body.String() != tc.body || rec.Header().Get("Retry-After") != "" {
			t.Errorf("%s: %d Retry-After %q %q; want %d %q", tc.name, rec.Code, rec.Header().Get("Retry-After"), rec.Body, tc.status, tc.body)
		}
	}
}

// TestReplyRateError: a reply that finds no token within replyRateWait fails with an
// error naming the broker and its rate and wrapping the limiter's own.
func TestReplyRateError(t *testing.T) {
	b := &Broker{key: "ns/b"}
	ctl, err := overload.New(overload.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.gate = ctl.Gate(b)
	b.gate.SetRate(0.001) // one token per 1000 s, the bucket holding one
	if err := b.replyRate(context.Background()); err != nil {
		t.Fatalf("first reply: %v, want the bucket's token", err)
	}
	err = b.replyRate(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rate limit of /ns/b (0.001 events/s") || errors.Unwrap(err) == nil ||
		!strings.Contains(errors.Unwrap(err).Error(), "rate: Wait") {
		t.Fatalf("second reply: %v, want the broker's rate named and the limiter's error wrapped", err)
	}
}
