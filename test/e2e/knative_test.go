package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

// replier is a real HTTP service that answers each event with a reply event made by fn
// (binary mode), or with 200 and no event when fn returns ok false — a Knative
// Sequence step, a Parallel filter or branch.
func replier(t *testing.T, fn func(h http.Header, body []byte) (typ string, out []byte, ok bool)) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		typ, out, ok := fn(r.Header, body)
		if !ok {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Ce-Specversion", "1.0")
		w.Header().Set("Ce-Id", r.Header.Get("Ce-Id"))
		w.Header().Set("Ce-Source", "/e2e/replier")
		w.Header().Set("Ce-Type", typ)
		if s := r.Header.Get("Ce-Subject"); s != "" {
			w.Header().Set("Ce-Subject", s)
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		w.Write(out)
	}))
	t.Cleanup(s.Close)
	return s
}

// appendStep is a Sequence step that appends "|name" to the data.
func appendStep(t *testing.T, name string) *httptest.Server {
	return replier(t, func(_ http.Header, body []byte) (string, []byte, bool) {
		return "step." + name, append(body, "|"+name...), true
	})
}

// refsFile writes a refs file of Services in namespace default: name → URL.
func refsFile(t *testing.T, services map[string]string) string {
	t.Helper()
	var b strings.Builder
	for name, url := range services {
		fmt.Fprintf(&b, "- {apiVersion: serving.knative.dev/v1, kind: Service, namespace: default, name: %s, url: %q}\n", name, url)
	}
	p := filepath.Join(t.TempDir(), "refs.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitLog(t *testing.T, b *broker, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(b.logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log has no %q", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTriggerServiceRefThroughRefsFile: a Trigger whose subscriber is a ref to a
// Service (with a uri path beside it, as Knative's docs write it) delivers to the URL a
// --refs entry gives; editing the refs file moves the deliveries.
func TestTriggerServiceRefThroughRefsFile(t *testing.T) {
	sub1 := newSubscriber(t, nil)
	sub2 := newSubscriber(t, nil)
	refs := refsFile(t, map[string]string{"event-display": sub1.URL})
	cfg := writeConfig(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: default}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: display}
spec:
  broker: default
  subscriber:
    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: event-display}
    uri: /insert
`)
	b := startBroker(t, "--config", cfg, "--refs", refs)
	waitLog(t, b, "via=refs-file")
	if st, body := postBinary(t, b.base+"/default/default", ceHeaders("1", "t"), []byte(`{}`)); st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	got := sub1.waitFor(t, 1, 5*time.Second)[0]
	at, err := time.Parse(time.RFC3339Nano, got.Header.Get("Ce-Knativearrivaltime"))
	if err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
		t.Errorf("knativearrivaltime %q: %v", got.Header.Get("Ce-Knativearrivaltime"), err)
	}

	// The refs file is watched: the Service moves.
	replaceFile(t, refs, fmt.Sprintf("- {apiVersion: serving.knative.dev/v1, kind: Service, namespace: default, name: event-display, url: %q}\n", sub2.URL))
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; sub2.count() == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("a changed refs file did not move the deliveries within 5s")
		}
		postBinary(t, b.base+"/default/default", ceHeaders(fmt.Sprint("m", i), "t"), []byte(`{}`))
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRefsPathResolved: the uri beside a ref is a path on the ref's address, as in
// Knative's bookstore sample.
func TestRefsPathResolved(t *testing.T) {
	paths := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		w.WriteHeader(202)
	}))
	defer srv.Close()
	refs := refsFile(t, map[string]string{"node-server-svc": srv.URL})
	cfg := writeConfig(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: bookstore-broker}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: db-insert-trigger}
spec:
  broker: bookstore-broker
  subscriber:
    ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: node-server-svc}
    uri: /insert
`)
	b := startBroker(t, "--config", cfg, "--refs", refs)
	postBinary(t, b.base+"/default/bookstore-broker", ceHeaders("1", "t"), []byte(`{}`))
	select {
	case p := <-paths:
		if p != "/insert" {
			t.Errorf("path %q, want /insert", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered")
	}
}

// TestSequenceAndParallel runs a Sequence of three steps behind a Trigger (its
// subscriber a ref to the Sequence, as Knative's samples write it) and a Parallel of two
// branches, one with a filter; every step, filter and branch is a real HTTP service
// reached through --refs, and the replies flow to the end.
func TestSequenceAndParallel(t *testing.T) {
	final := newSubscriber(t, nil)
	parFinal := newSubscriber(t, nil)
	onlyPass := replier(t, func(h http.Header, body []byte) (string, []byte, bool) {
		return "filtered", body, h.Get("Ce-Subject") == "pass"
	})
	branch := func(name string) *httptest.Server {
		return replier(t, func(_ http.Header, body []byte) (string, []byte, bool) {
			return "branch." + name, append(body, "|"+name...), true
		})
	}
	refs := refsFile(t, map[string]string{
		"first": appendStep(t, "1").URL, "second": appendStep(t, "2").URL, "third": appendStep(t, "3").URL,
		"only-pass": onlyPass.URL, "even": branch("even").URL, "odd": branch("odd").URL,
	})
	cfg := writeConfig(t, fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: to-sequence}
spec:
  broker: default
  filter: {attributes: {type: start}}
  subscriber:
    ref: {apiVersion: flows.knative.dev/v1, kind: Sequence, name: sequence}
---
apiVersion: flows.knative.dev/v1
kind: Sequence
metadata: {name: sequence}
spec:
  channelTemplate: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel}
  steps:
    - ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: first}
    - ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: second}
    - ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: third}
  reply:
    uri: %q
---
apiVersion: flows.knative.dev/v1
kind: Parallel
metadata: {name: fanout}
spec:
  branches:
    - filter: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: only-pass}}
      subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: even}}
    - subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: odd}}
  reply:
    uri: %q
`, final.URL, parFinal.URL))
	b := startBroker(t, "--config", cfg, "--refs", refs)

	if st, body := postBinary(t, b.base+"/default/default", ceHeaders("s1", "start"), []byte("x")); st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	got := final.waitFor(t, 1, 10*time.Second)[0]
	if string(got.Body) != "x|1|2|3" || got.Header.Get("Ce-Type") != "step.3" {
		t.Errorf("sequence result %q type %q, want x|1|2|3 from step.3", got.Body, got.Header.Get("Ce-Type"))
	}

	// The Parallel's address is its ingress channel.
	h := ceHeaders("p1", "fan")
	h["ce-subject"] = "pass"
	if st, body := postBinary(t, b.base+"/default/fanout-kn-parallel", h, []byte("p")); st != 202 {
		t.Fatalf("parallel ingest: %d %s", st, body)
	}
	h = ceHeaders("p2", "fan")
	h["ce-subject"] = "drop"
	postBinary(t, b.base+"/default/fanout-kn-parallel", h, []byte("d"))
	evs := parFinal.waitFor(t, 3, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // nothing more must come: the filter dropped p2's even branch
	bodies := map[string]bool{}
	for _, e := range parFinal.all() {
		bodies[string(e.Body)] = true
	}
	if len(parFinal.all()) != 3 || !bodies["p|even"] || !bodies["p|odd"] || !bodies["d|odd"] {
		t.Errorf("parallel results %v (%d events), want p|even, p|odd, d|odd", bodies, len(evs))
	}
}

// TestBadObjectDoesNotStopTheRest: a directory with one bad Trigger (and one whose
// broker is missing) serves the good ones; GET /status and `sluice status` say which
// objects are not ready and why, and `sluice validate` exits 1 on the directory.
func TestBadObjectDoesNotStopTheRest(t *testing.T) {
	sub := newSubscriber(t, nil)
	dir := t.TempDir()
	files := map[string]string{
		"a-broker.yaml": "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default}\n",
		"b-good.yaml": fmt.Sprintf("apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: good}\n"+
			"spec: {broker: default, subscriber: {uri: %q}}\n", sub.URL),
		"c-bad.yaml": "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: bad}\n" +
			"spec: {broker: default, filters: {exact: {type: a}}, subscriber: {uri: \"http://127.0.0.1:9/\"}}\n",
		"d-orphan.yaml": "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: orphan}\n" +
			"spec: {broker: nope, subscriber: {uri: \"http://127.0.0.1:9/\"}}\n",
		"e-deployment.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: display}\nspec: {replicas: 1}\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := startBroker(t, "--config", dir)
	if st, body := postBinary(t, b.base+"/default/default", ceHeaders("1", "t"), []byte(`{}`)); st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	sub.waitFor(t, 1, 5*time.Second)
	waitLog(t, b, "spec.filters: must be a list")

	resp, err := http.Get(b.base + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Ready   bool
		Objects []objectStatus
	}
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	state := map[string]string{}
	for _, o := range rep.Objects {
		switch {
		case o.Skipped:
			state[o.Name] = "skipped"
		case o.Ready:
			state[o.Name] = "ready"
		default:
			state[o.Name] = o.Reason
		}
	}
	if rep.Ready || state["default"] != "ready" || state["good"] != "ready" || state["display"] != "skipped" ||
		!strings.Contains(state["bad"], "spec.filters: must be a list") || !strings.Contains(state["orphan"], "spec.broker: Broker default/nope is not in the configuration") {
		t.Errorf("GET /status: ready %v, %v", rep.Ready, state)
	}

	out, err := exec.Command(sluiceBin, "status", "--addr", strings.TrimPrefix(b.base, "http://")).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("sluice status: %v, want exit 1\n%s", err, out)
	}
	for _, w := range []string{`KIND\s+NAMESPACE\s+NAME\s+READY\s+REASON`, `Trigger\s+default\s+bad\s+False\s+spec.filters: must be a list`,
		`Trigger\s+default\s+good\s+True`, `Deployment\s+default\s+display\s+Skipped`} {
		if !regexp.MustCompile(w).Match(out) {
			t.Errorf("sluice status output has no %q:\n%s", w, out)
		}
	}
	out, err = exec.Command(sluiceBin, "validate", dir).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "2 of 5 objects are not ready") {
		t.Errorf("sluice validate: %v\n%s", err, out)
	}
}

// TestSDKGoReceivesSubjectByteForByte: a subscriber written with cloudevents/sdk-go
// gets a non-ASCII subject exactly as the sender wrote it, whether the sender
// percent-encoded it (as the HTTP binding asks) or sent raw UTF-8 (as sdk-go does). A
// broker annotated sluice.dev/header-encoding: percent encodes strictly instead, for
// subscribers that decode.
func TestSDKGoReceivesSubjectByteForByte(t *testing.T) {
	const subject = `Grüße aus Köln "100%"`
	got := make(chan cloudevents.Event, 10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClientHTTP(cloudevents.WithListener(ln))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		_ = c.StartReceiver(ctx, func(e cloudevents.Event) { got <- e })
	}()
	defer func() { cancel(); <-recvDone }()
	url := "http://" + ln.Addr().String() + "/"
	cfg := writeConfig(t, fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: sdk}
spec: {broker: default, subscriber: {uri: %q}}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: strict, annotations: {sluice.dev/header-encoding: percent}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: sdk-strict}
spec: {broker: strict, subscriber: {uri: %q}}
`, url, url))
	b := startBroker(t, "--config", cfg)
	recv := func() cloudevents.Event {
		t.Helper()
		select {
		case e := <-got:
			return e
		case <-time.After(5 * time.Second):
			t.Fatal("the sdk-go receiver got nothing in 5s")
		}
		return cloudevents.Event{}
	}

	// 1. A sender that percent-encodes, as the HTTP binding asks (curl -H).
	h := ceHeaders("enc", "t")
	h["ce-subject"] = "Gr%C3%BC%C3%9Fe%20aus%20K%C3%B6ln%20%22100%25%22"
	if st, body := postBinary(t, b.base+"/default/default", h, []byte(`{}`)); st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	if e := recv(); e.Subject() != subject {
		t.Errorf("subject %q, want %q", e.Subject(), subject)
	}

	// 2. A sender using sdk-go, which writes the value raw.
	sender, err := cloudevents.NewClientHTTP()
	if err != nil {
		t.Fatal(err)
	}
	ev := cloudevents.NewEvent()
	ev.SetID("raw")
	ev.SetSource("/e2e")
	ev.SetType("t")
	ev.SetSubject(subject)
	if res := sender.Send(cloudevents.ContextWithTarget(context.Background(), b.base+"/default/default"), ev); !cloudevents.IsACK(res) {
		t.Fatalf("sdk-go send: %v", res)
	}
	if e := recv(); e.Subject() != subject {
		t.Errorf("subject %q, want %q", e.Subject(), subject)
	}

	// 3. Strict percent-encoding on request: sdk-go does not decode, so it sees it encoded.
	postBinary(t, b.base+"/default/strict", h, []byte(`{}`))
	if e := recv(); e.Subject() != "Gr%C3%BC%C3%9Fe%20aus%20K%C3%B6ln%20%22100%25%22" {
		t.Errorf("strict: subject %q", e.Subject())
	}
}

// headerMeaning decodes a ce- header value as Sluice does: each %XX escape is its byte,
// any other '%' stands for itself.
func headerMeaning(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// TestPingSourceIntoBroker: a PingSource whose sink is a ref to a Broker of the
// configuration fires into it, and the Broker's trigger delivers the events as Knative
// sends them. "@every 1s" is a schedule Knative's cron parser accepts too. Removing the
// PingSource from the file stops it.
func TestPingSourceIntoBroker(t *testing.T) {
	sub := newSubscriber(t, nil)
	broker := fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: ping}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: pings, namespace: ping}
spec:
  broker: default
  filter: {attributes: {type: dev.knative.sources.ping}}
  subscriber: {uri: %q}
`, sub.URL)
	cfg := writeConfig(t, broker+`---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: heartbeat, namespace: ping}
spec:
  schedule: "@every 1s"
  contentType: application/json
  data: '{"message": "Hello world!"}'
  ceOverrides: {extensions: {team: eventing}}
  sink:
    ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: default}
`)
	b := startBroker(t, "--config", cfg)
	got := sub.waitFor(t, 2, 10*time.Second)
	h := got[0].Header
	if h.Get("Ce-Type") != "dev.knative.sources.ping" || h.Get("Ce-Source") != "/apis/v1/namespaces/ping/pingsources/heartbeat" ||
		h.Get("Content-Type") != "application/json" || string(got[0].Body) != `{"message": "Hello world!"}` ||
		h.Get("Ce-Team") != "eventing" || h.Get("Ce-Knativearrivaltime") == "" || h.Get("Ce-Id") == got[1].Header.Get("Ce-Id") {
		t.Errorf("ping event: %v %q", h, got[0].Body)
	}
	replaceFile(t, cfg, broker)
	waitLog(t, b, "ping source removed")
	time.Sleep(200 * time.Millisecond) // a tick already in flight may still land
	n := sub.count()
	time.Sleep(2500 * time.Millisecond)
	if sub.count() != n {
		t.Errorf("%d pings after the PingSource was removed", sub.count()-n)
	}
}
