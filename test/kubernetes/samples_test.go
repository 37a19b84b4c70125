package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sluice-broker/sluice/internal/kubetest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// corpusDir holds real Knative manifests, each naming its source in a header comment.
const corpusDir = "../testdata/knative"

var (
	sequences   = schema.GroupVersionResource{Group: "flows.knative.dev", Version: "v1", Resource: "sequences"}
	parallels   = schema.GroupVersionResource{Group: "flows.knative.dev", Version: "v1", Resource: "parallels"}
	pingSources = schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "pingsources"}
)

// corpus returns the objects of the corpus files paths (relative to corpusDir), as
// `kubectl apply -f` reads them.
func corpus(t *testing.T, paths ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(corpusDir, p))
		if err != nil {
			t.Fatal(err)
		}
		d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := d.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

// refsFile writes a --refs file that maps each "apiVersion kind name" of namespace ns
// to a URL, and returns its path.
func refsFile(t *testing.T, ns string, urls map[string]string) string {
	t.Helper()
	var b strings.Builder
	for ref, url := range urls {
		f := strings.Fields(ref)
		fmt.Fprintf(&b, "- {apiVersion: %s, kind: %s, namespace: %s, name: %s, url: %q}\n", f[0], f[1], ns, f[2], url)
	}
	p := filepath.Join(t.TempDir(), "refs.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// refAndReady is "apiVersion kind ns/name:Ready-status" of one entry of a Sequence's
// or Parallel's status lists (key: "channel" or "subscription").
func refAndReady(entry any, key string) string {
	m, _ := entry.(map[string]any)
	ref, _ := m[key].(map[string]any)
	ready, _ := m["ready"].(map[string]any)
	return fmt.Sprintf("%v %v %v/%v:%v", ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"], ready["status"])
}

// delivery is one request a sampleSink received.
type delivery struct {
	path, id, typ, source, contentType, body, badwordfilter string
}

// sampleSink stands in for the services of Knative's samples, on 127.0.0.1: it records
// every request, and answers on the paths of replies with a reply event.
type sampleSink struct {
	*httptest.Server
	mu  sync.Mutex
	got []delivery
	// step: path → how the reply's ce- headers differ from the request's; false: no reply.
	step map[string]func(h http.Header) bool
}

func newSampleSink(t *testing.T, steps map[string]func(http.Header) bool) *sampleSink {
	s := &sampleSink{step: steps}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, delivery{path: r.URL.Path, id: r.Header.Get("ce-id"), typ: r.Header.Get("ce-type"), source: r.Header.Get("ce-source"),
			contentType: r.Header.Get("content-type"), body: string(body), badwordfilter: r.Header.Get("ce-badwordfilter")})
		s.mu.Unlock()
		change, ok := s.step[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		for k, v := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "ce-") || strings.EqualFold(k, "content-type") {
				w.Header()[k] = v
			}
		}
		if !change(w.Header()) {
			clear(w.Header())
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// count returns how many requests to path matched ok.
func (s *sampleSink) count(path string, ok func(delivery) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.got {
		if d.path == path && ok(d) {
			n++
		}
	}
	return n
}

// byID returns, for path, how many requests each id got.
func (s *sampleSink) byID(path string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, d := range s.got {
		if d.path == path {
			out[d.id]++
		}
	}
	return out
}

// TestBookstoreSequenceSample applies Knative's bookstore sample's Broker, Triggers and
// Sequence (code-samples/eventing/bookstore-sample-app) unchanged, run as the deploy
// manifests' ServiceAccount. Its Broker has no class annotation: of Knative's stock
// default class, which --kubernetes-classes adds. The sample's Services are mapped by
// --refs to a stand-in on 127.0.0.1 whose steps reply as the sample's functions do (the
// bad-word filter marks a comment good, the sentiment analysis turns it into a
// moderated-comment). A review comment sent to the Broker reaches event-display twice
// (two Triggers), goes through both steps of the Sequence, and its reply, back on the
// Broker, reaches the database insert and event-display: each exactly once. The
// Sequence's status is written as Knative's: ready, its address, its channels.
func TestBookstoreSequenceSample(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "bookstore"
	sink := newSampleSink(t, map[string]func(http.Header) bool{
		"/bad-word-filter": func(h http.Header) bool { h.Set("ce-badwordfilter", "good"); return true },
		"/sentiment": func(h http.Header) bool {
			h.Set("ce-type", "moderated-comment")
			h.Set("ce-id", "moderated-"+h.Get("ce-id"))
			return true
		},
	})
	refs := refsFile(t, ns, map[string]string{
		"serving.knative.dev/v1 Service bad-word-filter":        sink.URL + "/bad-word-filter",
		"serving.knative.dev/v1 Service sentiment-analysis-app": sink.URL + "/sentiment",
		"v1 Service event-display":                              sink.URL + "/display",
		"v1 Service node-server-svc":                            sink.URL + "/node", // the Trigger adds uri: /insert
	})
	s, _ := serveDeployed(t, "--refs", refs, "--kubernetes-classes", "Sluice,MTChannelBasedBroker")
	namespace(t, ns)
	applyAll(t, ns, corpus(t, "bookstore/200-broker.yaml", "bookstore/100-create-sequence.yaml",
		"bookstore/200-create-trigger.yaml", "bookstore/200-log-trigger.yaml"), "")

	b := waitFor(t, brokers, ns, "bookstore-broker", "ready", ready)
	addr, _, _ := unstructured.NestedString(b.Object, "status", "address", "url")
	seq := waitFor(t, sequences, ns, "sequence", "ready", ready)
	seqAddr, _, _ := unstructured.NestedString(seq.Object, "status", "address", "url")
	if want := s.Base + "/" + ns + "/sequence-kn-sequence-0"; seqAddr != want {
		t.Errorf("Sequence status.address.url %q, want %q", seqAddr, want)
	}
	chs, _, _ := unstructured.NestedSlice(seq.Object, "status", "channelStatuses")
	subs, _, _ := unstructured.NestedSlice(seq.Object, "status", "subscriptionStatuses")
	if len(chs) != 2 || len(subs) != 2 || refAndReady(chs[1], "channel") != "messaging.knative.dev/v1 InMemoryChannel bookstore/sequence-kn-sequence-1:True" ||
		refAndReady(subs[0], "subscription") != "messaging.knative.dev/v1 Subscription bookstore/sequence-kn-sequence-0:True" {
		t.Errorf("Sequence status: channels %v, subscriptions %v", chs, subs)
	}
	tr := waitFor(t, triggers, ns, "sequence-trigger", "ready", ready)
	if uri, _, _ := unstructured.NestedString(tr.Object, "status", "subscriberUri"); uri != seqAddr {
		t.Errorf("sequence-trigger status.subscriberUri %q, want the Sequence's address %q", uri, seqAddr)
	}
	for _, name := range []string{"temp-trigger", "db-insert-trigger", "log-trigger"} {
		waitFor(t, triggers, ns, name, "ready", ready)
	}

	const n = 5
	send(t, addr, "new-review-comment", "review", n)
	sluicetest.Eventually(t, hang, fmt.Sprintf("%d moderated comments inserted", n), func() bool {
		return sink.count("/insert", func(d delivery) bool { return d.typ == "moderated-comment" && d.badwordfilter == "good" }) == n
	})
	sluicetest.Eventually(t, hang, "every comment and its moderated reply at event-display", func() bool {
		return len(sink.byID("/display")) == 2*n
	})
	for i := range n {
		id := fmt.Sprintf("review-%d", i)
		for path, want := range map[string]map[string]int{
			"/bad-word-filter": {id: 1},
			"/sentiment":       {id: 1},
			"/insert":          {"moderated-" + id: 1},
			"/display":         {id: 2, "moderated-" + id: 1}, // temp-trigger and log-trigger; log-trigger
		} {
			for wid, w := range want {
				if got := sink.byID(path)[wid]; got != w {
					t.Errorf("%s got event %s %d times, want %d", path, wid, got, w)
				}
			}
		}
	}
}

// TestPingSourceSample applies two PingSource samples: the Knative tutorial's
// (sources.knative.dev/v1, JSON data) and Knative's docs' binary one (dataBase64, text/
// plain), each with its schedule, every two minutes, replaced by "@every 1s" so that the
// test does not wait for the clock. The docs' sample is written in v1beta2, which only
// Knative's conversion webhook turns into the stored v1 (a cluster with Knative's CRDs
// but not its webhook refuses it, as this API server does): it is applied as v1, whose
// fields it has. Their sinks, Knative Services, are mapped by --refs to a stand-in on
// 127.0.0.1. Each fires events of type dev.knative.sources.ping, source
// /apis/v1/namespaces/NS/pingsources/NAME, with the sample's data and content type, and
// its status gives the sink's URL.
func TestPingSourceSample(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "ping"
	sink := newSampleSink(t, nil)
	refs := refsFile(t, ns, map[string]string{
		"serving.knative.dev/v1 Service eventinghello": sink.URL + "/hello",
		"serving.knative.dev/v1 Service event-display": sink.URL + "/display",
	})
	serveDeployed(t, "--refs", refs)
	namespace(t, ns)
	objs := corpus(t, "tutorial/eventinghello-source-ping.yaml", "ping-source/ping-source-binary.yaml")
	for _, o := range objs {
		if err := unstructured.SetNestedField(o.Object, "@every 1s", "spec", "schedule"); err != nil {
			t.Fatal(err)
		}
		o.SetAPIVersion("sources.knative.dev/v1")
	}
	applyAll(t, ns, objs, "")
	for _, tt := range []struct{ name, path, contentType, body string }{
		{"eventinghello-ping-source", "/hello", "", `{"key": "every 2 mins"}`},
		{"test-ping-source-binary", "/display", "text/plain", "data"},
	} {
		p := waitFor(t, pingSources, ns, tt.name, "ready", ready)
		if uri, _, _ := unstructured.NestedString(p.Object, "status", "sinkUri"); uri != sink.URL+tt.path {
			t.Errorf("PingSource %s status.sinkUri %q, want %q", tt.name, uri, sink.URL+tt.path)
		}
		source := "/apis/v1/namespaces/" + ns + "/pingsources/" + tt.name
		sluicetest.Eventually(t, hang, "2 ticks of "+tt.name+" at the sink", func() bool {
			return sink.count(tt.path, func(d delivery) bool { return d.source == source }) >= 2
		})
		if bad := sink.count(tt.path, func(d delivery) bool {
			return d.source != source || d.typ != "dev.knative.sources.ping" || (tt.contentType != "" && d.contentType != tt.contentType) || d.body != tt.body
		}); bad > 0 {
			sink.mu.Lock()
			t.Errorf("%d events at %s not of type dev.knative.sources.ping from %s with %q %q: %+v", bad, tt.path, source, tt.contentType, tt.body, sink.got)
			sink.mu.Unlock()
		}
	}
}

// TestParallelSample applies Knative's Parallel sample (docs/eventing/samples/parallel/
// multiple-branches): two branches, each with a filter and a transformer, replies to
// event-display. Written in flows.knative.dev/v1beta1, which Knative no longer serves,
// it is applied as v1, whose fields it has. Its Services are mapped by --refs to a
// stand-in on 127.0.0.1: a filter lets an event through by replying with it (the even
// filter the events of even number, the odd filter the others), a transformer replies
// with an event of its branch's type. Every event sent to the Parallel's status address
// reaches exactly one transformer and, transformed, event-display; the Parallel's
// status names its ingress and branch channels and subscriptions, ready.
func TestParallelSample(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "parallel"
	even := func(h http.Header) bool {
		var n int
		fmt.Sscanf(h.Get("ce-id"), "n-%d", &n)
		return n%2 == 0
	}
	transform := func(typ string) func(http.Header) bool {
		return func(h http.Header) bool { h.Set("ce-type", typ); return true }
	}
	sink := newSampleSink(t, map[string]func(http.Header) bool{
		"/even-filter":      even,
		"/odd-filter":       func(h http.Header) bool { return !even(h) },
		"/even-transformer": transform("even"),
		"/odd-transformer":  transform("odd"),
	})
	urls := map[string]string{}
	for _, name := range []string{"even-filter", "odd-filter", "even-transformer", "odd-transformer", "event-display"} {
		urls["serving.knative.dev/v1 Service "+name] = sink.URL + "/" + name
	}
	s, _ := serveDeployed(t, "--refs", refsFile(t, ns, urls))
	namespace(t, ns)
	objs := corpus(t, "parallel-multiple-branches/parallel.yaml")
	for _, o := range objs {
		o.SetAPIVersion("flows.knative.dev/v1")
	}
	applyAll(t, ns, objs, "")

	p := waitFor(t, parallels, ns, "odd-even-parallel", "ready", ready)
	addr, _, _ := unstructured.NestedString(p.Object, "status", "address", "url")
	if want := s.Base + "/" + ns + "/odd-even-parallel-kn-parallel"; addr != want {
		t.Fatalf("Parallel status.address.url %q, want %q", addr, want)
	}
	const imc = "messaging.knative.dev/v1 InMemoryChannel parallel/odd-even-parallel-kn-parallel"
	const sub = "messaging.knative.dev/v1 Subscription parallel/odd-even-parallel-kn-parallel"
	in, _, _ := unstructured.NestedFieldNoCopy(p.Object, "status", "ingressChannelStatus")
	branches, _, _ := unstructured.NestedSlice(p.Object, "status", "branchStatuses")
	got := []string{refAndReady(in, "channel")}
	for _, b := range branches {
		m, _ := b.(map[string]any)
		got = append(got, refAndReady(m["filterSubscriptionStatus"], "subscription"), refAndReady(m["filterChannelStatus"], "channel"),
			refAndReady(m["subscriberSubscriptionStatus"], "subscription"))
	}
	want := []string{imc + ":True",
		sub + "-filter-0:True", imc + "-0:True", sub + "-0:True",
		sub + "-filter-1:True", imc + "-1:True", sub + "-1:True"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Parallel status:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	const n = 6
	send(t, addr, "number", "n", n)
	sluicetest.Eventually(t, hang, fmt.Sprintf("%d transformed events at event-display", n), func() bool {
		return len(sink.byID("/event-display")) == n
	})
	for i := range n {
		id, typ, other := fmt.Sprintf("n-%d", i), "odd", "/even-transformer"
		if i%2 == 0 {
			typ, other = "even", "/odd-transformer"
		}
		if got := sink.count("/event-display", func(d delivery) bool { return d.id == id && d.typ == typ }); got != 1 {
			t.Errorf("event %s at event-display as %s: %d times, want 1", id, typ, got)
		}
		if got := sink.byID("/" + typ + "-transformer")[id]; got != 1 {
			t.Errorf("event %s at the %s transformer %d times, want 1", id, typ, got)
		}
		if got := sink.byID(other)[id]; got != 0 {
			t.Errorf("event %s at %s, which its filter should have dropped", id, other)
		}
	}
}
