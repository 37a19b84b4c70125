package kubernetes

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sluice-broker/sluice/internal/kubetest"
)

// TestFlowChannelNotRunning: a Sequence whose channels run on a backend this server
// cannot open (jetstream, not configured) is written not ready, NotRunning, and so is
// each of its channels and subscriptions in its status, with the reason; a Sequence
// beside it on the default channel is ready, channels and all.
func TestFlowChannelNotRunning(t *testing.T) {
	kubetest.Need(t, srv)
	const ns = "flowdown"
	namespace(t, ns)
	serve(t, "--leader-election-namespace", ns)
	seq := func(name, ann string) string {
		return `{apiVersion: flows.knative.dev/v1, kind: Sequence, metadata: {name: ` + name + `, namespace: flowdown` + ann + `},
  spec: {steps: [{uri: "http://127.0.0.1:9/a"}]}}`
	}
	apply(t, sequences, seq("up", ""))
	apply(t, sequences, seq("down", `, annotations: {sluice.dev/channel: jetstream}`))
	up := waitFor(t, sequences, ns, "up", "ready", ready)
	if chs, _, _ := unstructured.NestedSlice(up.Object, "status", "channelStatuses"); len(chs) != 1 ||
		refAndReady(chs[0], "channel") != "messaging.knative.dev/v1 Channel flowdown/up-kn-sequence-0:True" {
		t.Errorf("the running Sequence's channels: %v", chs)
	}
	const why = "not running: the jetstream channel needs --data-dir DIR"
	down := waitFor(t, sequences, ns, "down", "not ready, NotRunning", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "False" && c["reason"] == "NotRunning"
	})
	chs, _, _ := unstructured.NestedSlice(down.Object, "status", "channelStatuses")
	subs, _, _ := unstructured.NestedSlice(down.Object, "status", "subscriptionStatuses")
	if len(chs) != 1 || len(subs) != 1 {
		t.Fatalf("status: channels %v, subscriptions %v", chs, subs)
	}
	for _, e := range []any{chs[0], subs[0]} {
		r, _ := e.(map[string]any)["ready"].(map[string]any)
		if r["status"] != "False" || r["reason"] != "NotRunning" || !strings.Contains(fmt.Sprint(r["message"]), why) {
			t.Errorf("%v: want Ready False, NotRunning, %q", e, why)
		}
	}
	for _, typ := range []string{"ChannelsReady", "SubscriptionsReady"} {
		c := conditionOf(down, typ)
		if c == nil || c["status"] != "False" || !strings.Contains(fmt.Sprint(c["message"]), "channel down-kn-sequence-0: "+why) {
			t.Errorf("condition %s: %v", typ, c)
		}
	}
}

// conditionOf returns the condition typ of u's status, or nil.
func conditionOf(u *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}
