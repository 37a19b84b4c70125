package kube

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// MaxRefKinds bounds the kinds of referenced objects (a Knative Service, a core Service,
// a Broker of another class...) Sluice watches to resolve refs from the cluster: each is
// one informer, caching every object of its kind. A ref to a kind beyond it is not
// resolved (its object not ready, naming the limit).
const MaxRefKinds = 16

// RefReadTimeout bounds how long the load that first meets a kind of referenced object
// waits for its informer to read the objects of that kind: a ref to an object that
// exists resolves in the first configuration applied (before the server is ready), not
// one load later. Past it, or on an error reading the kind, the ref is not ready yet and
// resolves once the informer has read its objects.
const RefReadTimeout = 10 * time.Second

// RefRetryInterval is how often, while a ref is unresolved because the API server could
// not be asked about its kind or did not serve it (Knative Serving installed later), the
// server is asked again: once per such group version an interval.
const RefRetryInterval = 10 * time.Second

// refs resolves refs from the objects of the cluster (config.WithRefResolver): a core
// Service to its cluster DNS name, any other kind to its status.address.url. It watches
// every Addressable kind a ref names, so that a ref resolves when its target appears,
// and stops watching a kind no ref names any more.
type refs struct {
	ctx     context.Context
	dyn     dynamic.Interface
	retryIn time.Duration                               // RefRetryInterval
	disc    func(gv string) ([]string, []string, error) // the resources and kinds the server serves in gv
	stores  map[string]cache.Store                      // the kinds Watch reads anyway, by Kind
	signal  func()
	wg      sync.WaitGroup // the informers and the goroutines that wait for their sync

	mu    sync.Mutex
	kinds map[schema.GroupKind]*refKind // watched kinds
	// notServed are the kinds the server did not serve in this load: asked once a load.
	notServed map[schema.GroupKind]bool
	asked     map[string]answer // "Kind.group ns/name" → the answer of the last load
	used      map[schema.GroupKind]bool
	// pending are the kinds refs of the last load name that discovery failed for or did
	// not serve: asked again each retryIn, by changed.
	pending map[schema.GroupVersionKind]bool
	retry   *time.Timer
}

// newRefs returns the refs of the kinds the server serves in stores, reading others
// with dyn and disc; signal is called when a ref may resolve otherwise.
func newRefs(ctx context.Context, dyn dynamic.Interface, disc func(gv string) ([]string, []string, error),
	stores map[string]cache.Store, signal func()) *refs {
	return &refs{ctx: ctx, dyn: dyn, disc: disc, stores: stores, signal: signal, retryIn: RefRetryInterval,
		kinds: map[schema.GroupKind]*refKind{}, asked: map[string]answer{}, notServed: map[schema.GroupKind]bool{},
		used: map[schema.GroupKind]bool{}, pending: map[schema.GroupVersionKind]bool{}}
}

// refKind is one kind refs watch.
type refKind struct {
	store  cache.Store
	synced func() bool
	err    error // the informer's last list or watch error; under refs.mu
	stop   context.CancelFunc
}

// answer is what a ref resolved to.
type answer struct {
	url string
	ok  bool
	err string
}

// begin forgets the refs asked by the last load: a load asks again for those it has.
func (r *refs) begin() {
	r.mu.Lock()
	r.asked = map[string]answer{}
	r.notServed = map[schema.GroupKind]bool{}
	r.used = map[schema.GroupKind]bool{}
	r.pending = map[schema.GroupVersionKind]bool{}
	r.mu.Unlock()
}

// end follows a load that was applied: it stops the informers of the kinds no ref of
// the load named, and asks again, after retryIn, about the kinds it could not.
func (r *refs) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for gk, k := range r.kinds {
		if !r.used[gk] {
			k.stop()
			delete(r.kinds, gk)
		}
	}
	if r.retry != nil {
		r.retry.Stop()
		r.retry = nil
	}
	if len(r.pending) > 0 {
		r.retry = time.AfterFunc(r.retryIn, r.signal)
	}
}

// stop stops every informer and the retry timer, and waits for them.
func (r *refs) stop() {
	r.mu.Lock()
	for gk, k := range r.kinds {
		k.stop()
		delete(r.kinds, gk)
	}
	if r.retry != nil {
		r.retry.Stop()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// resolve is the config.RefResolver: it answers from the informers, starting one for a
// kind not watched yet (and waiting up to RefReadTimeout for it to read its objects).
func (r *refs) resolve(apiVersion, kind, ns, name string) (string, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return "", false, nil // the configuration names the bad apiVersion
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: kind}
	if !addressable(gk) {
		return "", false, fmt.Errorf("%s %s %s/%s: not an Addressable kind: a ref names a core Service, or a kind whose objects have status.address", apiVersion, kind, ns, name)
	}
	k, err := r.watch(gv.WithKind(kind))
	if err != nil {
		return "", false, err
	}
	a := answer{}
	if k != nil {
		a = r.lookup(gk, k, ns, name)
	}
	r.mu.Lock()
	r.asked[askKey(gk, ns, name)] = a
	r.mu.Unlock()
	if a.err != "" {
		return "", false, fmt.Errorf("%s", a.err)
	}
	return a.url, a.ok, nil
}

func askKey(gk schema.GroupKind, ns, name string) string {
	return gk.String() + " " + ns + "/" + name
}

// asks reports whether the last load asked for the object o of kind gk.
func (r *refs) asks(gk schema.GroupKind, o any) bool {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, asked := r.asked[askKey(gk, u.GetNamespace(), u.GetName())]
	return asked
}

// addressable reports whether objects of kind gk may have an address: a core Service, or
// a kind of neither the core group nor Kubernetes' own groups (apps, batch,
// *.k8s.io...), which hold no Addressable kinds.
func addressable(gk schema.GroupKind) bool {
	switch {
	case gk.Group == "":
		return gk.Kind == "Service"
	case !strings.Contains(gk.Group, "."), strings.HasSuffix(gk.Group, ".k8s.io"):
		return false
	}
	return true
}

// changed reports whether any ref the last load asked for would now resolve otherwise.
func (r *refs) changed() bool {
	if r.pendingServed() {
		return true
	}
	r.mu.Lock()
	if len(r.pending) > 0 { // ask again later
		if r.retry != nil {
			r.retry.Stop()
		}
		r.retry = time.AfterFunc(r.retryIn, r.signal)
	}
	asked := make(map[string]answer, len(r.asked))
	for k, v := range r.asked {
		asked[k] = v
	}
	kinds := make(map[schema.GroupKind]*refKind, len(r.kinds))
	for k, v := range r.kinds {
		kinds[k] = v
	}
	r.mu.Unlock()
	for key, was := range asked {
		gkText, nsName, _ := strings.Cut(key, " ")
		ns, name, _ := strings.Cut(nsName, "/")
		gk := schema.ParseGroupKind(gkText)
		k, ok := kinds[gk]
		if !ok {
			if k = r.builtin(gk); k == nil {
				continue // not served
			}
		}
		if r.lookup(gk, k, ns, name) != was {
			return true
		}
	}
	return false
}

// pendingServed asks discovery again about the kinds the last load could not: whether
// one is now served.
func (r *refs) pendingServed() bool {
	r.mu.Lock()
	byGV := map[schema.GroupVersion][]string{}
	for gvk := range r.pending {
		byGV[gvk.GroupVersion()] = append(byGV[gvk.GroupVersion()], gvk.Kind)
	}
	r.mu.Unlock()
	for gv, want := range byGV {
		_, kinds, err := r.disc(gv.String())
		if err != nil {
			continue
		}
		for _, k := range want {
			if slices.Contains(kinds, k) {
				return true
			}
		}
	}
	return false
}

// watch returns the informer of kind gvk, starting it if it is new; nil if the server
// does not serve the kind.
func (r *refs) watch(gvk schema.GroupVersionKind) (*refKind, error) {
	gk := gvk.GroupKind()
	if k := r.builtin(gk); k != nil {
		return k, nil
	}
	r.mu.Lock()
	k, ok := r.kinds[gk]
	n := len(r.kinds)
	skip := r.notServed[gk]
	if ok {
		r.used[gk] = true
	}
	r.mu.Unlock()
	if ok || skip {
		return k, nil
	}
	names, kinds, err := r.disc(gvk.GroupVersion().String())
	notServed := func() (*refKind, error) {
		r.mu.Lock()
		r.notServed[gk] = true
		r.pending[gvk] = true
		r.mu.Unlock()
		return nil, nil
	}
	if apierrors.IsNotFound(err) {
		return notServed()
	}
	if err != nil {
		r.mu.Lock()
		r.pending[gvk] = true
		r.mu.Unlock()
		return nil, fmt.Errorf("%s %s: discovering it on the API server: %w", gvk.GroupVersion(), gvk.Kind, err)
	}
	resource := ""
	for i, kd := range kinds {
		if kd == gvk.Kind && !strings.Contains(names[i], "/") {
			resource = names[i]
		}
	}
	if resource == "" {
		return notServed()
	}
	if n >= MaxRefKinds {
		return nil, fmt.Errorf("%s %s: refs name more than %d kinds of objects in the cluster (kube.MaxRefKinds)", gvk.GroupVersion(), gvk.Kind, MaxRefKinds)
	}
	kctx, stop := context.WithCancel(r.ctx)
	inf := dynamicinformer.NewFilteredDynamicInformer(r.dyn, gvk.GroupVersion().WithResource(resource),
		"", 0, cache.Indexers{}, nil).Informer()
	k = &refKind{store: inf.GetStore(), synced: inf.HasSynced, stop: stop}
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		r.mu.Lock()
		k.err = err
		r.mu.Unlock()
		r.signal()
	})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if r.asks(gk, o) {
				r.signal()
			}
		},
		UpdateFunc: func(_, o any) {
			if r.asks(gk, o) {
				r.signal()
			}
		},
		DeleteFunc: func(o any) {
			if r.asks(gk, o) {
				r.signal()
			}
		},
	}); err != nil {
		stop()
		return nil, fmt.Errorf("%s %s: %w", gvk.GroupVersion(), gvk.Kind, err)
	}
	r.mu.Lock()
	r.kinds[gk] = k
	r.used[gk] = true
	r.mu.Unlock()
	r.wg.Go(func() { inf.RunWithContext(kctx) })
	ctx, cancel := context.WithTimeout(kctx, RefReadTimeout)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		if inf.HasSynced() {
			return true, nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return k.err != nil, nil // it cannot read the kind: the ref says why
	})
	r.wg.Go(func() { // once read, the refs to it resolve (or say it does not exist)
		if cache.WaitForCacheSync(kctx.Done(), inf.HasSynced) {
			r.signal()
		}
	})
	return k, nil
}

// builtin returns the informer Watch runs anyway of kind gk (a Broker of another
// class is in the Brokers' store), or nil.
func (r *refs) builtin(gk schema.GroupKind) *refKind {
	for _, res := range resources {
		if res.gvr.Group == gk.Group && res.kind == gk.Kind && res.kind != "ConfigMap" {
			if s, ok := r.stores[res.kind]; ok {
				return &refKind{store: s, synced: func() bool { return true }}
			}
		}
	}
	return nil
}

// lookup answers a ref to ns/name of kind gk from k's cache.
func (r *refs) lookup(gk schema.GroupKind, k *refKind, ns, name string) answer {
	what := gk.Kind + " " + ns + "/" + name
	if gk.Group != "" {
		what = gk.Kind + "." + gk.Group + " " + ns + "/" + name
	}
	if !k.synced() {
		r.mu.Lock()
		err := k.err
		r.mu.Unlock()
		if err != nil {
			return answer{err: fmt.Sprintf("%s: cannot read %s from the API server: %v", what, gk, err)}
		}
		return answer{err: what + ": not read from the API server yet"}
	}
	o, exists, err := k.store.GetByKey(ns + "/" + name)
	u, _ := o.(*unstructured.Unstructured)
	if err != nil || !exists || u == nil {
		return answer{err: what + " does not exist"}
	}
	if gk.Group == "" && gk.Kind == "Service" {
		return answer{url: serviceURL(u), ok: true}
	}
	url, _, _ := unstructured.NestedString(u.Object, "status", "address", "url")
	if url == "" {
		return answer{err: what + " has no status.address.url (it is not ready)"}
	}
	return answer{url: url, ok: true}
}

// serviceURL is the cluster address of core Service u: its DNS name, with its port
// unless it serves port 80.
func serviceURL(u *unstructured.Unstructured) string {
	host := "http://" + u.GetName() + "." + u.GetNamespace() + ".svc.cluster.local"
	ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
	first := int64(0)
	for _, p := range ports {
		m, _ := p.(map[string]any)
		port, _, _ := unstructured.NestedInt64(m, "port")
		if port == 80 {
			return host
		}
		if first == 0 {
			first = port
		}
	}
	if first == 0 {
		return host
	}
	return host + ":" + strconv.FormatInt(first, 10)
}
