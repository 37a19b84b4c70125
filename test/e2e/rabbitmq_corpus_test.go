package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-broker/sluice/channel/rabbitmq/rabbitmqtest"
)

// TestRabbitMQCorpusQuickSetup serves eventing-rabbitmq's quick-setup sample as it is
// (test/testdata/knative/rabbitmq-broker) on the RabbitMQ of scripts/rabbitmq.sh, its two
// Services (the failer and the event-display dead-letter sink) mapped to local servers by
// --ref-url-template, and posts the events its PingSources send: the failer fails those
// whose data is {"responsecode": 500}, as eventing-rabbitmq's failer does. Every event of the
// trigger's type reaches the failer; those it fails are tried 1 + the default 3 retries
// and then reach the dead-letter sink; events of another type are filtered out; the
// trigger's parallelism annotation ("10") caps the deliveries in flight.
//
// The sample's names are fixed, so its queues may hold events of an earlier run (and its
// PingSources may fire): only the events of this run, by their ids, are counted.
func TestRabbitMQCorpusQuickSetup(t *testing.T) {
	url := rabbitmqtest.URL(t)
	run := fmt.Sprintf("qs%d-", time.Now().UnixNano())
	const ok, failing, other, parallelism, retries = 30, 3, 5, 10, 3

	var mu sync.Mutex
	attempts := map[string]int{} // id of this run → attempts at the failer
	inFlight, maxInFlight := 0, 0
	failer := newSubscriber(t, func(r *http.Request, _ int) int {
		id := r.Header.Get("ce-id")
		if !strings.HasPrefix(id, run) {
			return http.StatusOK // an earlier run's event, or a PingSource's
		}
		mu.Lock()
		attempts[id]++
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		time.Sleep(100 * time.Millisecond) // deliveries overlap: the cap is what bounds them
		if strings.HasPrefix(id, run+"fail") {
			return http.StatusInternalServerError // the events whose data is {"responsecode": 500}
		}
		return http.StatusOK
	})
	dls := newSubscriber(t, nil)
	tmpl := fmt.Sprintf(`{{if eq .Name "failer"}}%s{{else if eq .Name "event-display"}}%s{{else}}http://127.0.0.1:1/{{end}}`, failer.URL, dls.URL)
	b := startBroker(t, "--config", corpusDir+"/rabbitmq-broker", "--rabbitmq-url", url, "--ref-url-template", tmpl)
	ingress := b.base + "/quick-setup-sample/default"

	post := func(id, typ, data string) {
		t.Helper()
		h := ceHeaders(id, typ)
		if st, body := postBinary(t, ingress, h, []byte(data)); st != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", id, st, body)
		}
	}
	for i := range other {
		post(fmt.Sprint(run, "other", i), "dev.example.other", `{"responsecode": 200}`)
	}
	for i := range failing {
		post(fmt.Sprint(run, "fail", i), "dev.knative.sources.ping", `{"responsecode": 500}`)
	}
	for i := range ok {
		post(fmt.Sprint(run, "ok", i), "dev.knative.sources.ping", `{"responsecode": 200}`)
	}

	ours := func(s *subscriber) map[string]int {
		n := map[string]int{}
		for _, r := range s.all() {
			if id := r.Header.Get("Ce-Id"); strings.HasPrefix(id, run) {
				n[id]++
			}
		}
		return n
	}
	waitIDs := func(s *subscriber, want int, what string) map[string]int {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if n := ours(s); len(n) >= want {
				return n
			} else if time.Now().After(deadline) {
				t.Fatalf("%s got %d of this run's events, want %d", what, len(n), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	delivered := waitIDs(failer, ok, "the failer")
	dead := waitIDs(dls, failing, "the dead-letter sink")

	for i := range ok {
		if id := fmt.Sprint(run, "ok", i); delivered[id] != 1 {
			t.Errorf("%s delivered %d times, want once", id, delivered[id])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range failing {
		id := fmt.Sprint(run, "fail", i)
		if dead[id] != 1 || attempts[id] != 1+retries {
			t.Errorf("%s: %d attempts, dead-lettered %d times; want %d attempts, then dead-lettered once", id, attempts[id], dead[id], 1+retries)
		}
	}
	for i := range other {
		if id := fmt.Sprint(run, "other", i); attempts[id] != 0 {
			t.Errorf("%s (another type) reached the failer %d times", id, attempts[id])
		}
	}
	if maxInFlight > parallelism {
		t.Errorf("%d deliveries in flight at once; rabbitmq.eventing.knative.dev/parallelism is %d", maxInFlight, parallelism)
	}
}
