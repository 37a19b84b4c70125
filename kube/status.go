package kube

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/redact"
)

// Reasons of the Ready condition Sluice writes.
const (
	// ReasonInvalid: the object as written cannot run (the message names the field).
	ReasonInvalid = "Invalid"
	// ReasonNotRunning: the object is valid, but it or the channel it runs on is not
	// running now (its backend unreachable).
	ReasonNotRunning = "NotRunning"
)

// elect runs for the Lease until ctx is done; while this replica holds it, it writes the
// status of every object after each change (written) and every StatusInterval.
func (w *watcher) elect(ctx context.Context, written <-chan struct{}) {
	e := w.opts.Election
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     w.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.LeaseDuration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					w.opts.Logger.Info("kubernetes: writing status (leader)", "lease", e.Namespace+"/"+e.Name, "identity", e.Identity)
					w.writeLoop(lctx, written)
				},
				OnStoppedLeading: func() {
					w.opts.Logger.Info("kubernetes: not writing status (leader no more)", "identity", e.Identity)
				},
			},
		})
		if err != nil { // the config is checked by defaults: not expected
			w.opts.Logger.Error("kubernetes: leader election", "err", err)
			return
		}
		le.Run(ctx) // returns when leadership is lost or ctx is done: stand again
	}
}

func (w *watcher) writeLoop(ctx context.Context, written <-chan struct{}) {
	t := time.NewTicker(w.opts.StatusInterval)
	defer t.Stop()
	failing := map[string]string{} // "Kind ns/name" → the error last logged for it
	for {
		w.writeAll(ctx, failing)
		select {
		case <-ctx.Done():
			return
		case <-written:
		case <-t.C:
		}
	}
}

// writeAll writes the status of every object of the applied configuration whose status
// on the server differs. A failed write is logged once per object and error (in failing).
func (w *watcher) writeAll(ctx context.Context, failing map[string]string) {
	w.mu.Lock()
	gens := w.applied
	w.mu.Unlock()
	objs := w.opts.Status()
	seen := make(map[string]bool, len(objs))
	defer func() {
		for k := range failing {
			if !seen[k] {
				delete(failing, k) // the object is gone
			}
		}
	}()
	for _, o := range objs {
		if ctx.Err() != nil {
			return
		}
		seen[o.Key()] = true
		gen, ours := gens[o.Key()]
		store := w.stores[o.Kind]
		if !ours || store == nil || o.Skipped || o.Kind == "ConfigMap" {
			continue
		}
		item, ok, err := store.GetByKey(storeKey(o.Namespace, o.Name))
		if err != nil || !ok {
			continue // deleted since
		}
		cur := item.(*unstructured.Unstructured)
		if cur.GetGeneration() != gen {
			continue // edited since: its status follows the next configuration
		}
		want := desiredStatus(o, gen, cur)
		if reflect.DeepEqual(want, cur.Object["status"]) {
			continue
		}
		up := cur.DeepCopy()
		up.Object["status"] = want
		r := resourceOf(o.Kind)
		_, err = w.dyn.Resource(r.gvr).Namespace(cur.GetNamespace()).UpdateStatus(ctx, up, metav1.UpdateOptions{})
		switch {
		case err == nil:
			delete(failing, o.Key())
			w.event(cur, want)
		case apierrors.IsConflict(err): // edited since: the next round writes again
		case failing[o.Key()] != err.Error(): // forbidden (RBAC), an outage…: retried every round
			failing[o.Key()] = err.Error()
			w.opts.Logger.Warn("kubernetes: status not written", "object", o.Key(), "err", redact.Text(err.Error()))
		}
	}
}

// MaxEventMessageBytes bounds the message of a Kubernetes Event Sluice records: the
// reason an object is not ready, cut there.
const MaxEventMessageBytes = 1024

// Reasons of the Kubernetes Events Sluice records besides ReasonInvalid and
// ReasonNotRunning.
const (
	// EventReasonReady: the object became ready.
	EventReasonReady = "Ready"
)

// event records a Kubernetes Event on cur if its Ready condition changes to the one of
// status want: Normal "Ready" when it becomes ready, Warning with the condition's
// reason and message when it becomes not ready or why changes.
func (w *watcher) event(cur *unstructured.Unstructured, want map[string]any) {
	if w.events == nil {
		return
	}
	was := readyOf(cur.Object["status"])
	now := readyOf(want)
	if now == nil || (was != nil && was["status"] == now["status"] && was["reason"] == now["reason"] && was["message"] == now["message"]) {
		return
	}
	if now["status"] == "True" {
		w.events.Event(cur, corev1.EventTypeNormal, EventReasonReady, "ready")
		return
	}
	reason, _ := now["reason"].(string)
	msg, _ := now["message"].(string)
	if len(msg) > MaxEventMessageBytes {
		msg = strings.ToValidUTF8(msg[:MaxEventMessageBytes-3], "") + "..."
	}
	w.events.Event(cur, corev1.EventTypeWarning, reason, "not ready: "+msg)
}

// readyOf returns the Ready condition of status, or nil.
func readyOf(status any) map[string]any {
	st, _ := status.(map[string]any)
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m
		}
	}
	return nil
}

// storeKey is the informer store's key of an object.
func storeKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func resourceOf(kind string) resource {
	for _, r := range resources {
		if r.kind == kind {
			return r
		}
	}
	return resource{}
}

// desiredStatus is the status object o should have, with gen observed, keeping what of
// cur's status Sluice does not write and the transition time of an unchanged condition.
func desiredStatus(o config.ObjectStatus, gen int64, cur *unstructured.Unstructured) map[string]any {
	st := map[string]any{}
	if old, ok := cur.Object["status"].(map[string]any); ok {
		for k, v := range old {
			st[k] = v
		}
	}
	old, _ := st["conditions"].([]any)
	reason, msg := "", o.Reason
	if !o.Ready {
		reason = ReasonInvalid
		if strings.HasPrefix(o.Reason, "not running: ") || strings.HasPrefix(o.Reason, "its channel ") {
			reason = ReasonNotRunning
		}
	}
	conds := []any{condition(old, "Ready", o.Ready, reason, msg)}
	if o.Kind == "Sequence" || o.Kind == "Parallel" {
		conds = append(conds, flowStatus(st, o, old, reason, msg)...)
	}
	st["conditions"] = conds
	st["observedGeneration"] = gen
	switch {
	case o.Address != "" && o.Ready:
		st["address"] = map[string]any{"url": o.Address}
		st["addresses"] = []any{map[string]any{"url": o.Address}}
	case o.Address != "" || hasAddress(o.Kind):
		delete(st, "address") // not ready: no address to send to
		delete(st, "addresses")
	}
	// The URL a Trigger's subscriber, a PingSource's sink resolved to.
	for kind, field := range map[string]string{"Trigger": "subscriberUri", "PingSource": "sinkUri"} {
		if o.Kind != kind {
			continue
		}
		delete(st, field)
		for _, r := range o.Refs {
			if (r.Field == "spec.subscriber" || r.Field == "spec.sink") && o.Ready {
				st[field] = r.URL
			}
		}
	}
	return st
}

// condition is the condition typ, True if ok, else False with reason; it keeps the
// lastTransitionTime of the condition of old of the same type and status.
func condition(old []any, typ string, ok bool, reason, msg string) map[string]any {
	c := map[string]any{"type": typ, "status": "True"}
	if !ok {
		c["status"] = "False"
		c["reason"] = reason
	}
	if msg != "" {
		c["message"] = msg
	}
	c["lastTransitionTime"] = time.Now().UTC().Format(time.RFC3339)
	for _, x := range old {
		if m, ok := x.(map[string]any); ok && m["type"] == typ && m["status"] == c["status"] && m["lastTransitionTime"] != nil {
			c["lastTransitionTime"] = m["lastTransitionTime"]
		}
	}
	return c
}

// Conditions of a Sequence and a Parallel besides Ready, as Knative's controllers
// write them.
const (
	ConditionChannelsReady      = "ChannelsReady"
	ConditionSubscriptionsReady = "SubscriptionsReady"
	ConditionAddressable        = "Addressable"
)

// flowStatus writes into st what Knative writes of a Sequence's or Parallel's channels
// and subscriptions (channelStatuses and subscriptionStatuses; ingressChannelStatus and
// branchStatuses), each with its Ready condition, and returns the conditions
// ChannelsReady, SubscriptionsReady and Addressable. Sluice runs the channels inside
// itself, named as Knative names the objects it creates: they are not objects of the
// cluster. While no channel runs (the flow is invalid), the lists are left out and
// the conditions give the flow's reason.
func flowStatus(st map[string]any, o config.ObjectStatus, old []any, reason, msg string) []any {
	// The Ready condition each channel and subscription had, by "channel NAME" and
	// "subscription NAME", for its transition time.
	was := map[string][]any{}
	var note func(v any)
	note = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				note(e)
			}
		case map[string]any:
			for _, k := range []string{"channel", "subscription"} {
				if ref, ok := x[k].(map[string]any); ok {
					was[k+" "+fmt.Sprint(ref["name"])] = []any{x["ready"]}
					return
				}
			}
			for _, e := range x {
				note(e)
			}
		}
	}
	for _, k := range []string{"channelStatuses", "subscriptionStatuses", "ingressChannelStatus", "branchStatuses"} {
		note(st[k])
		delete(st, k)
	}
	chs := o.FlowChannels
	addressable := condition(old, ConditionAddressable, o.Ready && o.Address != "", reason, msg)
	if len(chs) == 0 || (o.Kind == "Parallel" && len(chs[0].Subscriptions) != len(chs)-1) {
		if msg == "" {
			reason, msg = ReasonNotRunning, "no channel runs"
		}
		return []any{condition(old, ConditionChannelsReady, false, reason, msg),
			condition(old, ConditionSubscriptionsReady, false, reason, msg), addressable}
	}
	// A subscription is ready when the channel it is on runs.
	channel := func(ch config.FlowChannel) map[string]any {
		return map[string]any{"channel": map[string]any{"apiVersion": ch.APIVersion, "kind": ch.Kind, "name": ch.Name, "namespace": o.Namespace},
			"ready": condition(was["channel "+ch.Name], "Ready", ch.Ready, ReasonNotRunning, ch.Reason)}
	}
	sub := func(name string, on config.FlowChannel) map[string]any {
		return map[string]any{"subscription": map[string]any{"apiVersion": "messaging.knative.dev/v1", "kind": "Subscription", "name": name, "namespace": o.Namespace},
			"ready": condition(was["subscription "+name], "Ready", on.Ready, ReasonNotRunning, on.Reason)}
	}
	if o.Kind == "Sequence" {
		var cs, ss []any
		for _, ch := range chs {
			cs = append(cs, channel(ch))
			for _, s := range ch.Subscriptions {
				ss = append(ss, sub(s, ch))
			}
		}
		st["channelStatuses"], st["subscriptionStatuses"] = cs, ss
	} else {
		st["ingressChannelStatus"] = channel(chs[0])
		var bs []any
		for i, ch := range chs[1:] {
			b := map[string]any{"filterSubscriptionStatus": sub(chs[0].Subscriptions[i], chs[0]), "filterChannelStatus": channel(ch)}
			if len(ch.Subscriptions) > 0 {
				b["subscriberSubscriptionStatus"] = sub(ch.Subscriptions[0], ch)
			}
			bs = append(bs, b)
		}
		st["branchStatuses"] = bs
	}
	down := ""
	for _, ch := range chs {
		if !ch.Ready {
			down = "channel " + ch.Name + ": " + ch.Reason
			break
		}
	}
	return []any{condition(old, ConditionChannelsReady, down == "", ReasonNotRunning, down),
		condition(old, ConditionSubscriptionsReady, down == "", ReasonNotRunning, down), addressable}
}

// hasAddress reports whether objects of kind are Addressable.
func hasAddress(kind string) bool {
	switch kind {
	case "Broker", "Channel", "InMemoryChannel", "KafkaChannel", "Sequence", "Parallel":
		return true
	}
	return false
}
