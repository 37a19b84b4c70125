package kube

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/kubetest"
)

var (
	sequences = schema.GroupVersionResource{Group: "flows.knative.dev", Version: "v1", Resource: "sequences"}
	parallels = schema.GroupVersionResource{Group: "flows.knative.dev", Version: "v1", Resource: "parallels"}
)

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

// refAndReady is "name:Ready-status" of one entry of a Sequence's or Parallel's
// status lists (key: "channel" or "subscription").
func refAndReady(entry any, key string) string {
	m, _ := entry.(map[string]any)
	ref, _ := m[key].(map[string]any)
	ready, _ := m["ready"].(map[string]any)
	return fmt.Sprintf("%v %v %v/%v:%v", ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"], ready["status"])
}

// TestFlowStatus: a Sequence's and a Parallel's status are written as Knative's
// controllers write them: the address, Ready, ChannelsReady, SubscriptionsReady and
// Addressable, and each channel and subscription Sluice runs them on, by Knative's
// names, with its Ready condition. A Sequence that runs nothing lists none and says
// why in every condition; an invalid edit keeps the last good version's channels. The
// status is written once, not again at every round.
func TestFlowStatus(t *testing.T) {
	kubetest.Need(t, srv)
	ns := "flows"
	namespace(t, ns)
	watch(t, Options{Election: Election{Namespace: ns, Identity: "only"}})
	apply(t, sequences, `{apiVersion: flows.knative.dev/v1, kind: Sequence, metadata: {name: s, namespace: flows},
  spec: {channelTemplate: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel}, steps: [{uri: "http://127.0.0.1:9/a"}, {uri: "http://127.0.0.1:9/b"}]}}`)
	apply(t, parallels, `{apiVersion: flows.knative.dev/v1, kind: Parallel, metadata: {name: p, namespace: flows},
  spec: {channelTemplate: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel},
    branches: [{subscriber: {uri: "http://127.0.0.1:9/x"}}, {filter: {uri: "http://127.0.0.1:9/f"}, subscriber: {uri: "http://127.0.0.1:9/y"}}]}}`)
	apply(t, sequences, `{apiVersion: flows.knative.dev/v1, kind: Sequence, metadata: {name: dangling, namespace: flows},
  spec: {steps: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: missing}}]}}`)
	isReady := func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "True"
	}

	s := waitFor(t, sequences, ns, "s", "ready", isReady)
	if url, _, _ := unstructured.NestedString(s.Object, "status", "address", "url"); url != "http://127.0.0.1:8080/flows/s-kn-sequence-0" {
		t.Errorf("sequence status.address.url %q", url)
	}
	for _, typ := range []string{ConditionChannelsReady, ConditionSubscriptionsReady, ConditionAddressable} {
		if c := conditionOf(s, typ); c == nil || c["status"] != "True" {
			t.Errorf("sequence condition %s: %v", typ, c)
		}
	}
	const imc = "messaging.knative.dev/v1 InMemoryChannel flows/"
	const sub = "messaging.knative.dev/v1 Subscription flows/"
	check := func(u *unstructured.Unstructured, key string, want []string, path ...string) {
		t.Helper()
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, append([]string{"status"}, path...)...)
		list, ok := v.([]any)
		if !ok {
			list = []any{v}
		}
		var got []string
		for _, e := range list {
			got = append(got, refAndReady(e, key))
		}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("%s status.%s: %v, want %v", u.GetName(), strings.Join(path, "."), got, want)
		}
	}
	check(s, "channel", []string{imc + "s-kn-sequence-0:True", imc + "s-kn-sequence-1:True"}, "channelStatuses")
	check(s, "subscription", []string{sub + "s-kn-sequence-0:True", sub + "s-kn-sequence-1:True"}, "subscriptionStatuses")

	p := waitFor(t, parallels, ns, "p", "ready", isReady)
	if url, _, _ := unstructured.NestedString(p.Object, "status", "address", "url"); url != "http://127.0.0.1:8080/flows/p-kn-parallel" {
		t.Errorf("parallel status.address.url %q", url)
	}
	check(p, "channel", []string{imc + "p-kn-parallel:True"}, "ingressChannelStatus")
	branches, _, _ := unstructured.NestedSlice(p.Object, "status", "branchStatuses")
	if len(branches) != 2 {
		t.Fatalf("parallel status.branchStatuses: %v", branches)
	}
	for i, b := range branches {
		m := b.(map[string]any)
		got := refAndReady(m["filterSubscriptionStatus"], "subscription") + ", " + refAndReady(m["filterChannelStatus"], "channel") + ", " +
			refAndReady(m["subscriberSubscriptionStatus"], "subscription")
		want := fmt.Sprintf("%sp-kn-parallel-filter-%d:True, %sp-kn-parallel-%d:True, %sp-kn-parallel-%d:True", sub, i, imc, i, sub, i)
		if got != want {
			t.Errorf("parallel branch %d: %s, want %s", i, got, want)
		}
	}

	d := waitFor(t, sequences, ns, "dangling", "not ready", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		return c != nil && c["status"] == "False"
	})
	for _, typ := range []string{"Ready", ConditionChannelsReady, ConditionSubscriptionsReady, ConditionAddressable} {
		if c := conditionOf(d, typ); c == nil || c["status"] != "False" || c["reason"] != ReasonInvalid || !strings.Contains(fmt.Sprint(c["message"]), "spec.steps[0]") {
			t.Errorf("dangling sequence condition %s: %v", typ, c)
		}
	}
	if st, _ := d.Object["status"].(map[string]any); st["channelStatuses"] != nil || st["address"] != nil {
		t.Errorf("dangling sequence: channels or an address written: %v", st)
	}

	// Written once: a round that finds nothing changed writes nothing.
	rv := s.GetResourceVersion()
	time.Sleep(time.Second) // several status rounds
	if again, err := srv.Dynamic().Resource(sequences).Namespace(ns).Get(context.Background(), "s", metav1.GetOptions{}); err != nil || again.GetResourceVersion() != rv {
		t.Errorf("the ready sequence's status was written again (resourceVersion %s, then %s): %v", rv, again.GetResourceVersion(), err)
	}

	// An invalid edit: not ready, the last good version's channels listed.
	apply(t, sequences, `{apiVersion: flows.knative.dev/v1, kind: Sequence, metadata: {name: s, namespace: flows},
  spec: {channelTemplate: {apiVersion: messaging.knative.dev/v1, kind: InMemoryChannel}, steps: [{uri: "relative"}]}}`)
	s = waitFor(t, sequences, ns, "s", "not ready after an invalid edit", func(u *unstructured.Unstructured) bool {
		c := readyCondition(u)
		g, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return c != nil && c["status"] == "False" && g == u.GetGeneration()
	})
	check(s, "channel", []string{imc + "s-kn-sequence-0:True", imc + "s-kn-sequence-1:True"}, "channelStatuses")
	if c := conditionOf(s, ConditionChannelsReady); c == nil || c["status"] != "True" {
		t.Errorf("the last good version's channels run: ChannelsReady %v", c)
	}
}

// TestFlowStatusNotRunning: a channel of a Sequence that is not running is not ready in
// channelStatuses, and so are the subscriptions on it, with the reason; ChannelsReady
// names it; the other channel is ready.
func TestFlowStatusNotRunning(t *testing.T) {
	o := config.ObjectStatus{Kind: "Sequence", Namespace: "ns", Name: "s", Reason: "its channel ns/s-kn-sequence-1 is not running: down",
		FlowChannels: []config.FlowChannel{
			{APIVersion: "messaging.knative.dev/v1", Kind: "InMemoryChannel", Name: "s-kn-sequence-0", Subscriptions: []string{"s-kn-sequence-0"}, Ready: true},
			{APIVersion: "messaging.knative.dev/v1", Kind: "InMemoryChannel", Name: "s-kn-sequence-1", Subscriptions: []string{"s-kn-sequence-1"}, Reason: "not running: down"},
		}}
	cur := &unstructured.Unstructured{Object: map[string]any{}}
	st := desiredStatus(o, 1, cur)
	u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	if c := conditionOf(u, "Ready"); c["status"] != "False" || c["reason"] != ReasonNotRunning {
		t.Errorf("Ready %v", c)
	}
	if c := conditionOf(u, ConditionChannelsReady); c["status"] != "False" || c["reason"] != ReasonNotRunning || c["message"] != "channel s-kn-sequence-1: not running: down" {
		t.Errorf("ChannelsReady %v", c)
	}
	for _, list := range []string{"channelStatuses", "subscriptionStatuses"} {
		l, _ := st[list].([]any)
		if len(l) != 2 {
			t.Fatalf("%s %v", list, l)
		}
		r0, r1 := l[0].(map[string]any)["ready"].(map[string]any), l[1].(map[string]any)["ready"].(map[string]any)
		if r0["status"] != "True" || r1["status"] != "False" || r1["reason"] != ReasonNotRunning || r1["message"] != "not running: down" {
			t.Errorf("%s: %v, %v", list, r0, r1)
		}
	}
	// Once written, the same status again is equal: nothing to write.
	cur.Object["status"] = st
	if again := desiredStatus(o, 1, cur); !reflect.DeepEqual(again, st) {
		t.Errorf("a second round differs:\n%v\n%v", again, st)
	}
}
