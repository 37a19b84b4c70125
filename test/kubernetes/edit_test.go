package kubernetes

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluice-broker/sluice/internal/kubetest"
	"github.com/sluice-broker/sluice/internal/sluicetest"
)

// notReadyNaming returns a waitFor condition: Ready False, of the object's own
// generation, with reason Invalid and a message that contains field.
func notReadyNaming(field string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return c != nil && c["status"] == "False" && c["reason"] == "Invalid" && g == u.GetGeneration() &&
			strings.Contains(fmt.Sprint(c["message"]), field)
	}
}

// TestInvalidEditAndBack edits running objects into invalid states with client-go, as
// `kubectl apply` would, and back: a Trigger's filter (a CESQL expression that does
// not parse), another Trigger's delivery (a backoffDelay that is no duration) and the
// Broker's delivery. Each turns Ready=False, naming the field, while its last good
// version keeps running: every event sent meanwhile reaches every Trigger, the edited
// ones included. A Trigger created invalid runs nothing until it is fixed. Edited back,
// each is Ready=True again, and no accepted event is lost.
func TestInvalidEditAndBack(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "edits"
	namespace(t, ns)
	rcv := newReceiver(t)
	serve(t, "--leader-election-namespace", ns)
	broker := func(spec string) string {
		return `{apiVersion: eventing.knative.dev/v1, kind: Broker, metadata: {name: default, namespace: edits, annotations: {eventing.knative.dev/broker.class: Sluice}}` + spec + `}`
	}
	trigger := func(name, spec string) string {
		return `{apiVersion: eventing.knative.dev/v1, kind: Trigger, metadata: {name: ` + name + `, namespace: edits},
  spec: {broker: default, subscriber: {uri: "` + rcv.URL + `/` + name + `"}` + spec + `}}`
	}
	const (
		goodFilter    = `, filter: {attributes: {type: order}}`
		goodCESQL     = `, filters: [{cesql: "type = 'order'"}]`
		badCESQL      = `, filters: [{cesql: "type = = 'order'"}]`
		badAttributes = `, filter: {attributes: {"Bad Name": order}}`
		goodDelivery  = `, delivery: {retry: 2, backoffPolicy: linear, backoffDelay: PT0.1S}`
		badDelivery   = `, delivery: {retry: 2, backoffPolicy: linear, backoffDelay: soon}`
	)
	apply(t, brokers, broker(""))
	apply(t, triggers, trigger("filtered", goodCESQL))
	apply(t, triggers, trigger("delivered", goodFilter+goodDelivery))
	apply(t, triggers, trigger("untouched", goodFilter))
	b := waitFor(t, brokers, ns, "default", "ready", ready)
	addr, _, _ := unstructured.NestedString(b.Object, "status", "address", "url")
	for _, name := range []string{"filtered", "delivered", "untouched"} {
		waitFor(t, triggers, ns, name, "ready", ready)
	}
	const n = 10
	all := []string{"filtered", "delivered", "untouched"}
	want := func(phase string, each int, paths ...string) {
		t.Helper()
		sluicetest.Eventually(t, hang, fmt.Sprintf("%s: %d events at each of %v", phase, each, paths), func() bool {
			for _, p := range paths {
				if rcv.count("/"+p) != each {
					return false
				}
			}
			return true
		})
	}
	send(t, addr, "order", "before", n)
	send(t, addr, "other", "dropped", 3) // every filter drops these
	want("before the edits", n, all...)

	// Into invalid states. A Trigger created invalid is not ready and runs nothing.
	apply(t, triggers, trigger("filtered", badCESQL))
	apply(t, triggers, trigger("delivered", goodFilter+badDelivery))
	apply(t, brokers, broker(`, spec: {delivery: {backoffDelay: soon}}`))
	apply(t, triggers, trigger("born-bad", badAttributes))
	waitFor(t, triggers, ns, "filtered", "not ready naming spec.filters", notReadyNaming("spec.filters[0]"))
	waitFor(t, triggers, ns, "delivered", "not ready naming spec.delivery.backoffDelay", notReadyNaming("spec.delivery.backoffDelay"))
	waitFor(t, brokers, ns, "default", "not ready naming spec.delivery.backoffDelay", notReadyNaming("spec.delivery.backoffDelay"))
	waitFor(t, triggers, ns, "born-bad", "not ready naming spec.filter.attributes", notReadyNaming("spec.filter.attributes"))
	waitFor(t, triggers, ns, "untouched", "still ready", ready)
	send(t, addr, "order", "during", n)         // the last good versions run: all get them
	send(t, addr, "other", "during-dropped", 3) // and their filters still drop these
	want("while invalid", 2*n, all...)
	if got := rcv.count("/born-bad"); got != 0 {
		t.Fatalf("the Trigger created invalid got %d events while invalid", got)
	}

	// And back: ready again, and the events flow on.
	apply(t, triggers, trigger("filtered", goodCESQL))
	apply(t, triggers, trigger("delivered", goodFilter+goodDelivery))
	apply(t, brokers, broker(""))
	apply(t, triggers, trigger("born-bad", goodFilter))
	for _, name := range append(all, "born-bad") {
		waitFor(t, triggers, ns, name, "ready again", ready)
	}
	waitFor(t, brokers, ns, "default", "ready again", ready)
	send(t, addr, "order", "after", n)
	want("edited back", 3*n, all...)
	want("fixed", n, "born-bad") // only what was sent after it became ready
}
