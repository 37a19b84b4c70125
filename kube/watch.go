package kube

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/sluice-broker/sluice/config"
)

// EventComponent is the source component of the Kubernetes Events Sluice records.
const EventComponent = "sluice"

// systemNamespace is Knative's: its ConfigMaps (config-br-defaults, default-ch-webhook,
// config-kreference-mapping) configure every namespace.
const systemNamespace = "knative-eventing"

// watcher is the state of one Watch.
type watcher struct {
	opts    Options
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	disc    discovery.DiscoveryInterface
	classes map[string]bool
	stores  map[string]cache.Store // by kind, of the resources served
	changed chan struct{}          // a change to read, buffered 1

	refs   *refs                // resolves refs from the cluster; set by run
	events record.EventRecorder // records readiness changes as Kubernetes Events; set by run

	mu      sync.Mutex
	applied map[string]int64 // "Kind ns/name" → the generation of the applied configuration
}

func newWatcher(rc *rest.Config, opts Options) (*watcher, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	w := &watcher{opts: opts, dyn: dyn, kube: kc, disc: kc.Discovery(), classes: map[string]bool{},
		stores: map[string]cache.Store{}, changed: make(chan struct{}, 1)}
	for _, c := range opts.Classes {
		w.classes[c] = true
	}
	return w, nil
}

// served reports whether the API server serves r.
func (w *watcher) served(r resource) (bool, error) {
	list, err := w.disc.ServerResourcesForGroupVersion(r.gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kube: discovering %s: %w", r.gvr.GroupVersion(), err)
	}
	for _, ar := range list.APIResources {
		if ar.Name == r.gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// mapsConfigMaps reports whether a class whose Brokers read ConfigMaps of their own
// namespaces (spec.config) is run: only then are ConfigMaps read in every namespace.
func (w *watcher) mapsConfigMaps() bool {
	return w.classes["MTChannelBasedBroker"] || w.classes["Kafka"]
}

func (w *watcher) run(ctx context.Context, apply func(*config.Config), onError func(error)) error {
	all := dynamicinformer.NewDynamicSharedInformerFactory(w.dyn, 0)
	system := dynamicinformer.NewFilteredDynamicSharedInformerFactory(w.dyn, 0, systemNamespace, nil)
	var synced []cache.InformerSynced
	for _, r := range resources {
		ok, err := w.served(r)
		if err != nil {
			return err
		}
		if !ok {
			if r.optional {
				w.opts.Logger.Info("kubernetes: not served, not read", "resource", r.gvr.String())
				continue
			}
			return fmt.Errorf("kube: %s: %w", r.gvr.String(), errNotServed)
		}
		f := all
		if r.kind == "ConfigMap" && !w.mapsConfigMaps() {
			f = system // a Sluice broker reads no ConfigMap of its own
		}
		inf := f.ForResource(r.gvr).Informer()
		gk := schema.GroupKind{Group: r.gvr.Group, Kind: r.kind}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { w.signal() },
			UpdateFunc: func(old, cur any) { w.update(gk, old, cur) },
			DeleteFunc: func(any) { w.signal() },
		}); err != nil {
			return fmt.Errorf("kube: %s: %w", r.gvr.String(), err)
		}
		w.stores[r.kind] = inf.GetStore()
		synced = append(synced, inf.HasSynced)
	}
	w.refs = newRefs(ctx, w.dyn, func(gv string) ([]string, []string, error) {
		list, err := w.disc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return nil, nil, err
		}
		var names, kinds []string
		for _, ar := range list.APIResources {
			names, kinds = append(names, ar.Name), append(kinds, ar.Kind)
		}
		return names, kinds, nil
	}, w.stores, w.signal)
	all.Start(ctx.Done())
	system.Start(ctx.Done())
	defer all.Shutdown()
	defer system.Shutdown()
	defer w.refs.stop()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("kube: the informers did not sync")
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	written := make(chan struct{}, 1) // a new configuration applied: write its status
	if w.opts.Status != nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: w.kube.CoreV1().Events("")})
		w.events = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent, Host: w.opts.Election.Identity})
		bg.Go(func() { w.elect(ctx, written) })
	}
	var prev *config.Config
	var last [sha256.Size]byte
	first := true
	for {
		docs, gens := w.documents()
		h := sha256.New()
		for _, d := range docs {
			h.Write([]byte(d.Name))
			h.Write([]byte{0})
			h.Write(d.Data)
			h.Write([]byte{0})
		}
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		// A load also follows the objects refs name (their address, or their coming).
		if first || sum != last || w.refs.changed() {
			first, last = false, sum
			w.refs.begin()
			cfg, err := config.ReadDocuments(docs, append(slices.Clone(w.opts.Config),
				config.WithPrevious(prev), config.WithRefResolver(w.refs.resolve))...)
			if err != nil {
				onError(err)
			} else {
				prev = cfg
				w.refs.end()
				apply(cfg)
				w.mu.Lock()
				w.applied = gens
				w.mu.Unlock()
				select {
				case written <- struct{}{}:
				default:
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.changed:
		}
		// Let a burst of changes settle: one load for a `kubectl apply` of many objects.
		t := time.NewTimer(w.opts.Settle)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		select {
		case <-w.changed:
		default:
		}
	}
}

func (w *watcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// update signals a change unless only the status (or the resource version) changed:
// Sluice's own status writes are no change of configuration. A change of an object a
// ref names (a Broker of another class) is one: its status.address.url may have changed.
func (w *watcher) update(gk schema.GroupKind, old, cur any) {
	if w.refs != nil && w.refs.asks(gk, cur) {
		w.signal()
		return
	}
	o, ok1 := old.(*unstructured.Unstructured)
	c, ok2 := cur.(*unstructured.Unstructured)
	if ok1 && ok2 && o.GetGeneration() == c.GetGeneration() && o.GetGeneration() != 0 &&
		mapsEqual(o.GetAnnotations(), c.GetAnnotations()) && mapsEqual(o.GetLabels(), c.GetLabels()) {
		return
	}
	w.signal()
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// documents returns the objects Sluice runs as configuration documents, in a stable
// order, and the generation of each by "Kind ns/name".
func (w *watcher) documents() ([]config.Document, map[string]int64) {
	objs := map[string][]*unstructured.Unstructured{}
	for kind, s := range w.stores {
		for _, o := range s.List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				objs[kind] = append(objs[kind], u)
			}
		}
	}
	// Brokers of other classes are other controllers': neither they nor their Triggers
	// are read. A Trigger whose Broker does not exist is read (not ready: no broker).
	others := map[string]bool{}    // "ns/name" of the Brokers of other classes
	var defaults map[string]string // config-br-defaults' data: the class of a Broker with none
	for _, c := range objs["ConfigMap"] {
		if c.GetNamespace() == systemNamespace && c.GetName() == "config-br-defaults" {
			defaults, _, _ = unstructured.NestedStringMap(c.Object, "data")
			if defaults == nil {
				defaults = map[string]string{}
			}
		}
	}
	if _, err := config.BrokerDefaultClass(defaults, ""); err != nil {
		w.opts.Logger.Warn("kubernetes: Brokers with no class annotation are of class "+DefaultBrokerClass, "err", err)
	}
	var brokers []*unstructured.Unstructured
	for _, b := range objs["Broker"] {
		if w.classes[brokerClass(b, defaults)] {
			brokers = append(brokers, b)
		} else {
			others[b.GetNamespace()+"/"+b.GetName()] = true
		}
	}
	objs["Broker"] = brokers
	var triggers []*unstructured.Unstructured
	for _, t := range objs["Trigger"] {
		b, _, _ := unstructured.NestedString(t.Object, "spec", "broker")
		if !others[t.GetNamespace()+"/"+b] {
			triggers = append(triggers, t)
		}
	}
	objs["Trigger"] = triggers
	objs["ConfigMap"] = w.namedConfigMaps(objs["ConfigMap"], brokers)

	gens := map[string]int64{}
	var docs []config.Document
	for _, r := range resources {
		list := objs[r.kind]
		slices.SortFunc(list, func(a, b *unstructured.Unstructured) int {
			return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
		})
		for _, o := range list {
			ns := o.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			gens[r.kind+" "+ns+"/"+o.GetName()] = o.GetGeneration()
			docs = append(docs, config.Document{Name: documentName(r, o), Data: specOnly(o)})
		}
	}
	return docs, gens
}

// documentName names an object from the API server in messages and in
// ObjectStatus.File: "kubernetes:<resource>/<namespace>/<name>".
func documentName(r resource, o *unstructured.Unstructured) string {
	res := r.gvr.Resource
	if r.gvr.Group != "" {
		res += "." + r.gvr.Group
	}
	return "kubernetes:" + res + "/" + o.GetNamespace() + "/" + o.GetName()
}

// brokerClass is the class of Broker b: its annotation, or the class defaults (the data
// of config-br-defaults, nil if there is none) give its namespace, as the file mode reads
// them; DefaultBrokerClass if they are invalid.
func brokerClass(b *unstructured.Unstructured, defaults map[string]string) string {
	if c := b.GetAnnotations()[AnnotationBrokerClass]; c != "" {
		return c
	}
	c, _ := config.BrokerDefaultClass(defaults, b.GetNamespace())
	return c
}

// namedConfigMaps returns the ConfigMaps of cms that the configuration reads: Knative's
// own in knative-eventing, and those the Brokers name in spec.config.
func (w *watcher) namedConfigMaps(cms, brokers []*unstructured.Unstructured) []*unstructured.Unstructured {
	named := map[string]bool{}
	for _, b := range brokers {
		ref, _, _ := unstructured.NestedStringMap(b.Object, "spec", "config")
		if ref["kind"] == "ConfigMap" && ref["name"] != "" {
			ns := ref["namespace"]
			if ns == "" {
				ns = b.GetNamespace()
			}
			named[ns+"/"+ref["name"]] = true
		}
	}
	var out []*unstructured.Unstructured
	for _, c := range cms {
		switch {
		case c.GetNamespace() == systemNamespace && knativeConfigMap(c.GetName()):
		case named[c.GetNamespace()+"/"+c.GetName()]:
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// knativeConfigMap reports whether name is one of Knative's ConfigMaps that Sluice
// reads in knative-eventing.
func knativeConfigMap(name string) bool {
	switch name {
	case "config-br-defaults", "config-br-default-channel", "kafka-broker-config", "default-ch-webhook", "config-kreference-mapping":
		return true
	}
	return false
}

// specOnly returns the JSON of o as the configuration reads it: without its status and
// the metadata the server keeps (resource version, managed fields), so that a status
// write is not a change.
func specOnly(o *unstructured.Unstructured) []byte {
	c := o.DeepCopy()
	delete(c.Object, "status")
	unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
	unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(c.Object, "metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration")
	b, err := json.Marshal(c.Object)
	if err != nil { // an object decoded from JSON encodes again
		return []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":%q}`, o.GetAPIVersion(), o.GetKind()))
	}
	return b
}
