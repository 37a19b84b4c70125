package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sluice-broker/sluice/cmd/sluice/cli"
)

// TestDLQInChromium runs sluice serve with a trigger whose subscriber refuses every
// event and which has no dead-letter sink, sends it 3 events, and watches GET /ui in
// headless Chromium: the dead-letter store section lists the 3 kept events with their
// code, reason and ids, the trigger row counts them as /metrics does, and the page
// logged no error.
func TestDLQInChromium(t *testing.T) {
	browser := chromium(t)
	if testing.Short() {
		t.Skip("-short: a browser test")
	}
	sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	defer sub.Close()
	addr := freeAddr(t)
	base := "http://" + addr
	cfg := fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: shop, namespace: demo}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: billing, namespace: demo}
spec: {broker: shop, subscriber: {uri: %q}, delivery: {retry: 0}}
`, sub.URL)
	cfgPath := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Listing dead letters needs the operator token: the browser sends it on every request.
	const token = "dlq-test-token-0123456789"
	tokenPath := filepath.Join(t.TempDir(), "ops.token")
	if err := os.WriteFile(tokenPath, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOGC", "100")
	t.Setenv("GOMEMLIMIT", "off")
	var serveLog syncBuffer
	sctx, stopServe := context.WithCancel(context.Background())
	served := make(chan int, 1)
	go func() {
		served <- cli.Execute(sctx, []string{"serve", "--config", cfgPath, "--addr", addr, "--ops-token-file", tokenPath}, io.Discard, &serveLog)
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
	if !waitFor(30*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatal("serve never became ready")
	}
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodPost, base+"/demo/shop", strings.NewReader(`{}`))
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": fmt.Sprintf("order-%d", i), "Ce-Source": "/shop",
			"Ce-Type": "order.placed", "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("event %d: %s", i, resp.Status)
		}
	}

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1100),
		chromedp.Flag("disable-dev-shm-usage", true))...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelTimeout()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, stopListening := context.WithCancel(ctx)
	var errs consoleErrors
	errs.listen(lctx)
	defer func() { stopListening(); <-errs.done }()
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
		Headers: network.Headers{"Authorization": "Bearer " + token}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui")); err != nil {
		t.Fatal(err)
	}
	listed := func() []string {
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('#dlqentries tbody tr[data-dlq]')).map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.dataset.k + "=" + td.dataset.v).join(" | "))`))
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	var rows []string
	if !waitFor(60*time.Second, func() bool { rows = listed(); return len(rows) == 3 }) {
		t.Fatalf("the page lists %d dead letters; want 3: %q", len(rows), rows)
	}
	all := strings.Join(rows, "\n")
	for _, want := range []string{"code=503", "reason=down for maintenance", "attempts=1", "type=order.placed", "source=/shop",
		"event_id=order-0", "event_id=order-1", "event_id=order-2"} {
		if !strings.Contains(all, want) {
			t.Errorf("the listed dead letters lack %q:\n%s", want, all)
		}
	}
	sum, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("dlq-sum").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sum, "3 kept") || !strings.Contains(sum, "(memory)") {
		t.Errorf("store summary %q; want 3 kept, in memory", sum)
	}
	want := mustScrape(t, "http://ops:"+token+"@"+addr, `sluice_dlq_stored_total{trigger="demo/billing"}`) // Basic auth from the URL
	if !waitFor(15*time.Second, func() bool {
		got, ok := pageValue(ctx, t, "trigger", "demo/billing", "dlq_stored_total")
		return ok && got == want
	}) {
		got, _ := pageValue(ctx, t, "trigger", "demo/billing", "dlq_stored_total")
		t.Errorf("page: %v kept in the store; /metrics %v", got, want)
	}
	if e := errs.take(); len(e) > 0 {
		t.Errorf("the dashboard logged errors: %q", e)
	}
}
