package ui_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-broker/sluice/cmd/sluice/cli"
	"github.com/sluice-broker/sluice/internal/syncbuf"
	"github.com/sluice-broker/sluice/loadtest/bench"
	"github.com/sluice-broker/sluice/loadtest/cevent"
	"github.com/sluice-broker/sluice/loadtest/load"
	"github.com/sluice-broker/sluice/loadtest/pacer"
	"github.com/sluice-broker/sluice/loadtest/receive"
)

// chromium finds Debian's chromium (or another Chrome). Under CI=true a missing browser
// fails the test (make test installs it with apt); elsewhere the test skips, saying why.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium on PATH (Debian: apt-get install -y chromium; make test installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
	return ""
}

// freeAddr returns a 127.0.0.1 address with a port free right now.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is the log of a process or server that the test reads while it runs.
type syncBuffer = syncbuf.Buffer

// scrape returns the value of the series of /metrics whose line starts with series
// (name and labels exactly as exposed), and whether it is there.
func scrape(t *testing.T, base, series string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("/metrics line %q: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

func mustScrape(t *testing.T, base, series string) float64 {
	t.Helper()
	v, ok := scrape(t, base, series)
	if !ok {
		t.Fatalf("/metrics has no %s", series)
	}
	return v
}

// pageValue reads the raw value of a cell of the page: the row whose data-broker or
// data-trigger is name, the cell whose data-k is key. ok is false while it is not shown.
func pageValue(ctx context.Context, t *testing.T, row, name, key string) (float64, bool) {
	t.Helper()
	js := fmt.Sprintf(`(function(){const c=document.querySelector('tr[data-%s=%q] td[data-k=%q]');return c?c.dataset.v:"";})()`, row, name, key)
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("reading %s %s %s: %v", row, name, key, err)
	}
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s %s %s = %q: %v", row, name, key, s, err)
	}
	return v, true
}

// waitFor polls cond every 200 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// consoleErrors collects what the page writes to the console as an error, the
// exceptions it throws and the browser's error log entries (a resource that failed to
// load).
type consoleErrors struct {
	mu   sync.Mutex
	msgs []string
	done chan struct{}
}

// listen collects until ctx ends; wait waits for that.
func (c *consoleErrors) listen(ctx context.Context) {
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				c.mu.Lock()
				c.msgs = append(c.msgs, m.String())
				c.mu.Unlock()
			}
		}
	}()
}

func (c *consoleErrors) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msgs
	c.msgs = nil
	return m
}

// saveScreenshot writes png into the test's artifact directory (kept with go test
// -artifacts) and, when SLUICE_SCREENSHOTS names a directory, there too (make
// screenshots refreshes docs/images that way).
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("SLUICE_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
}

// TestDashboardInChromium runs `sluice serve` in-process with a broker and three
// triggers — one toward the bench's receiver (slow, answering 503 to 5% of requests),
// one toward a subscriber that refuses everything with 400 (every event dead-lettered),
// and its dead-letter sink's own — drives it with `sluice bench` at 250 events/s for 12 s,
// and watches GET /ui in headless Chromium: the rates show, the ingress rate agrees with
// the rate of /metrics' counter, a screenshot is taken under load; once the load has
// settled the page's totals, queue depths and in-flight limits equal /metrics exactly,
// the dead letters' reasons are listed, and the page logged no error. (The bench's HTML
// report has its own browser test: loadtest/report's TestReportInChromium.)
func TestDashboardInChromium(t *testing.T) {
	browser := chromium(t)
	if testing.Short() {
		t.Skip("-short: the browser test takes about 40 s")
	}

	addr, recvAddr := freeAddr(t), freeAddr(t)
	base := "http://" + addr
	bad := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "refused by the test subscriber: schema v2 expected", http.StatusBadRequest)
	})}
	badLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go bad.Serve(badLn)
	defer bad.Close()
	dls := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
	})}
	dlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go dls.Serve(dlsLn)
	defer dls.Close()

	cfg := fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: shop, namespace: demo}
spec:
  delivery: {retry: 5, backoffPolicy: exponential, backoffDelay: PT0.05S}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: orders, namespace: demo}
spec: {broker: shop, subscriber: {uri: "http://%s/"}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: audit, namespace: demo}
spec:
  broker: shop
  subscriber: {uri: "http://%s/"}
  delivery: {retry: 0, deadLetterSink: {uri: "http://%s/"}}
`, recvAddr, badLn.Addr(), dlsLn.Addr())
	cfgPath := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	// sluice serve, in-process (it sets the GC's parameters: put them back after).
	t.Setenv("GOGC", "100")
	t.Setenv("GOMEMLIMIT", "off")
	var serveLog syncBuffer
	sctx, stopServe := context.WithCancel(context.Background())
	served := make(chan int, 1)
	go func() {
		served <- cli.Execute(sctx, []string{"serve", "--config", cfgPath, "--addr", addr, "--max-in-flight", "64"}, io.Discard, &serveLog)
	}()
	defer func() {
		stopServe()
		select {
		case <-served:
		case <-time.After(40 * time.Second):
			t.Error("serve did not shut down")
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", serveLog.String())
		}
	}()
	if !waitFor(10*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatal("serve never became ready")
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1100),
		chromedp.Flag("disable-dev-shm-usage", true))...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelTimeout()
	if err := chromedp.Do(ctx); err != nil { // opens the tab, so the console misses nothing
		t.Fatal(err)
	}
	lctx, stopListening := context.WithCancel(ctx)
	var errs consoleErrors
	errs.listen(lctx)
	defer func() { stopListening(); <-errs.done }()

	// The load: sluice bench through the broker, its receiver the orders trigger's subscriber.
	tmpl, err := cevent.NewTemplate(cevent.Binary, cevent.DefaultType, cevent.DefaultSource, "ui", bytes.Repeat([]byte("x"), 1024), 1)
	if err != nil {
		t.Fatal(err)
	}
	const rate, secs = 250, 12
	type benchOut struct {
		res *bench.Result
		err error
	}
	benched := make(chan benchOut, 1)
	go func() {
		res, err := bench.Run(context.Background(), bench.Options{
			Load: load.Options{Target: base + "/demo/shop", Pacer: pacer.Steps{{Rate: rate, Duration: secs * time.Second}},
				Template: tmpl, Connections: 16},
			Receive:      receive.Options{FailRatio: 0.05, DelayMin: time.Millisecond, DelayMax: 8 * time.Millisecond},
			ReceiverAddr: recvAddr, Settle: 20 * time.Second,
		})
		benched <- benchOut{res, err}
	}()

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui")); err != nil {
		t.Fatal(err)
	}
	if !waitFor(15*time.Second, func() bool {
		in, _ := pageValue(ctx, t, "broker", "demo/shop", "ingress_rate")
		out, _ := pageValue(ctx, t, "trigger", "demo/orders", "delivery_rate")
		return in > 0 && out > 0
	}) {
		t.Fatal("the page never showed an ingress and a delivery rate")
	}

	// Under load: the page's ingress rate (over its last 5 s) against the rate of the
	// counter in /metrics over 5 s.
	m1 := mustScrape(t, base, `sluice_events_accepted_total{broker="demo/shop"}`)
	time.Sleep(5 * time.Second)
	m2 := mustScrape(t, base, `sluice_events_accepted_total{broker="demo/shop"}`)
	metricsRate := (m2 - m1) / 5
	pageRate, _ := pageValue(ctx, t, "broker", "demo/shop", "ingress_rate")
	pageDelivery, _ := pageValue(ctx, t, "trigger", "demo/orders", "delivery_rate")
	t.Logf("under load: page ingress %.1f/s, /metrics %.1f/s; page delivery to orders %.1f/s", pageRate, metricsRate, pageDelivery)
	// Both show the load; how close they are depends on how evenly a loaded machine let
	// the generator send (TestMonitorRates checks the page's arithmetic on fixed samples).
	if metricsRate <= 0 || pageRate <= 0 {
		t.Errorf("page ingress rate %.1f/s, /metrics says %.1f/s over the same seconds; want both above 0", pageRate, metricsRate)
	}
	if pageDelivery <= 0 {
		t.Errorf("page delivery rate %.1f under load", pageDelivery)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, "ui-under-load.png", shot)

	out := <-benched
	if out.err != nil {
		t.Fatalf("bench: %v", out.err)
	}
	res := out.res
	t.Logf("bench: accepted %d, delivered %d, lost %d", res.Accepted, res.Delivered, res.Lost)
	if res.Accepted == 0 || res.Lost != 0 {
		t.Errorf("bench: accepted %d, lost %d; want every accepted event delivered", res.Accepted, res.Lost)
	}

	// Settled: the page's totals equal the counters of /metrics exactly.
	checks := []struct{ row, name, key, series string }{
		{"broker", "demo/shop", "accepted_total", `sluice_events_accepted_total{broker="demo/shop"}`},
		{"trigger", "demo/orders", "delivered_total", `sluice_delivery_delivered_total{trigger="demo/orders"}`},
		{"trigger", "demo/orders", "queue_depth", `sluice_queue_depth{broker="demo/shop",trigger="demo/orders"}`},
		{"trigger", "demo/orders", "inflight_limit", `sluice_delivery_inflight_limit{trigger="demo/orders"}`},
		{"trigger", "demo/audit", "dead_lettered_total", `sluice_delivery_dead_lettered_total{trigger="demo/audit"}`},
		{"trigger", "demo/audit", "failed_total", `sluice_delivery_attempts_total{dest="subscriber",result="4xx",trigger="demo/audit"}`},
	}
	var mismatch []string
	if !waitFor(15*time.Second, func() bool {
		mismatch = mismatch[:0]
		for _, c := range checks {
			want := mustScrape(t, base, c.series)
			got, ok := pageValue(ctx, t, c.row, c.name, c.key)
			if !ok || got != want {
				mismatch = append(mismatch, fmt.Sprintf("%s %s: page %v (shown %v), /metrics %v", c.name, c.key, got, ok, want))
			}
		}
		return len(mismatch) == 0
	}) {
		t.Errorf("the page never agreed with /metrics: %s", strings.Join(mismatch, "; "))
	}
	if got, _ := pageValue(ctx, t, "trigger", "demo/orders", "delivered_total"); got < float64(res.Accepted) {
		t.Errorf("page: %v delivered to orders, bench had %d accepted", got, res.Accepted)
	}
	if d, _ := pageValue(ctx, t, "trigger", "demo/audit", "dead_lettered_total"); d != float64(res.Accepted) {
		t.Errorf("page: %v dead-lettered by audit, want every accepted event (%d)", d, res.Accepted)
	}
	p50, ok50 := pageValue(ctx, t, "trigger", "demo/orders", "p50_ms")
	p99, ok99 := pageValue(ctx, t, "trigger", "demo/orders", "p99_ms")
	if !ok50 || !ok99 || p50 <= 0 || p99 < p50 {
		t.Errorf("orders latency: p50 %v (%v), p99 %v (%v); want 0 < p50 ≤ p99", p50, ok50, p99, ok99)
	}
	dlRow, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#deadletters tbody tr:first-child td')).map(td => td.dataset.k + "=" + td.dataset.v)`))
	if err != nil {
		t.Fatal(err)
	}
	row := strings.Join(dlRow, " | ")
	if !strings.Contains(row, "trigger=demo/audit") || !strings.Contains(row, "code=400") ||
		!strings.Contains(row, "reason=refused by the test subscriber: schema v2 expected") || !strings.Contains(row, "outcome=dead_lettered") {
		t.Errorf("last dead letter row: %s", row)
	}
	if e := errs.take(); len(e) > 0 {
		t.Errorf("the dashboard logged errors: %q", e)
	}
}
