// Package kube runs Sluice as a Knative broker class against a Kubernetes API server:
// client-go informers read the Knative objects Sluice runs (Brokers of the classes it is
// given, their Triggers, channels, Subscriptions, flows, PingSources, EventPolicies and
// the ConfigMaps they name), which become a configuration the way files do
// (config.ReadDocuments); the status of each object is written back on its status
// subresource by one replica, chosen by leader election on a coordination.k8s.io Lease.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-broker/sluice/config"
)

// Defaults of Options.
const (
	// DefaultSettle is how long a change waits for more changes before the objects are
	// read again: a `kubectl apply` of many objects is loaded once.
	DefaultSettle = 100 * time.Millisecond
	// DefaultStatusInterval is how often the leader compares the status of every object
	// with what Sluice runs, besides after every change; it writes only what differs.
	DefaultStatusInterval = 2 * time.Second
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod are the leader
	// election's timings, as Knative's controllers use them: another replica takes
	// over status writes within a lease duration of the leader's death.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultLeaseName is the name of the Lease the replicas elect a leader on.
	DefaultLeaseName = "sluice-status-writer"
)

// Broker classes: the annotation that names one, and the ones Sluice runs.
const (
	AnnotationBrokerClass = "eventing.knative.dev/broker.class"
	// DefaultBrokerClass is the class of a Broker with no class annotation when
	// knative-eventing/config-br-defaults names none: Knative's stock default.
	DefaultBrokerClass = "MTChannelBasedBroker"
)

// Classes returns the broker classes Sluice runs: what Options.Classes and `sluice serve
// --kubernetes-classes` accept.
func Classes() []string { return []string{config.ClassSluice, "MTChannelBasedBroker", "Kafka"} }

// Options configure Watch.
type Options struct {
	// Classes are the broker classes to run: Brokers of other classes, and their
	// Triggers, are left to other controllers. Empty means config.ClassSluice.
	Classes []string
	// Config are the options of each load (ingress URL, refs file, ref template).
	Config []config.Option
	// Settle is DefaultSettle if 0.
	Settle time.Duration
	// StatusInterval is DefaultStatusInterval if 0.
	StatusInterval time.Duration
	// Status returns the status of every object as Sluice runs it (broker.Server.Status):
	// what is written back. Nil: no status is written.
	Status func() []config.ObjectStatus
	// Election chooses the one replica that writes status.
	Election Election
	// Logger is slog.Default() if nil.
	Logger *slog.Logger
}

// Election configures the leader election of the status writer.
type Election struct {
	// Namespace and Name are the Lease's: Namespace defaults to $POD_NAMESPACE, then
	// "default"; Name to DefaultLeaseName.
	Namespace, Name string
	// Identity is this replica's name in the Lease: the host name (the pod's name) and
	// the process id if empty.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod default to DefaultLeaseDuration,
	// DefaultRenewDeadline and DefaultRetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (o *Options) defaults() error {
	if len(o.Classes) == 0 {
		o.Classes = []string{config.ClassSluice}
	}
	for _, c := range o.Classes {
		if !slices.Contains(Classes(), c) {
			return fmt.Errorf("kube: broker class %q: Sluice runs %v", c, Classes())
		}
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	e := &o.Election
	if e.Namespace == "" {
		e.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if e.Namespace == "" {
		e.Namespace = "default"
	}
	if e.Name == "" {
		e.Name = DefaultLeaseName
	}
	if e.Identity == "" {
		host, _ := os.Hostname()
		e.Identity = fmt.Sprintf("%s_%d", host, os.Getpid())
	}
	if e.LeaseDuration <= 0 {
		e.LeaseDuration = DefaultLeaseDuration
	}
	if e.RenewDeadline <= 0 {
		e.RenewDeadline = DefaultRenewDeadline
	}
	if e.RetryPeriod <= 0 {
		e.RetryPeriod = DefaultRetryPeriod
	}
	if e.RenewDeadline >= e.LeaseDuration || e.RetryPeriod >= e.RenewDeadline {
		return fmt.Errorf("kube: leader election: want retry period %v < renew deadline %v < lease duration %v",
			e.RetryPeriod, e.RenewDeadline, e.LeaseDuration)
	}
	return nil
}

// RESTConfig returns the client configuration of kubeconfig (a kubeconfig file), or the
// in-cluster configuration (the pod's service account) if kubeconfig is "".
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kube: in-cluster configuration (or give --kubeconfig): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kube: --kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// resource is one kind Sluice reads from the API server.
type resource struct {
	gvr  schema.GroupVersionResource
	kind string
	// optional resources are read only if the server serves them (KafkaChannel needs
	// Knative's Kafka CRDs); the others must be served.
	optional bool
}

// resources are the kinds Sluice reads, with ConfigMaps last.
var resources = []resource{
	{schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "brokers"}, "Broker", false},
	{schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1", Resource: "triggers"}, "Trigger", false},
	{schema.GroupVersionResource{Group: "messaging.knative.dev", Version: "v1", Resource: "channels"}, "Channel", false},
	{schema.GroupVersionResource{Group: "messaging.knative.dev", Version: "v1", Resource: "inmemorychannels"}, "InMemoryChannel", false},
	{schema.GroupVersionResource{Group: "messaging.knative.dev", Version: "v1beta1", Resource: "kafkachannels"}, "KafkaChannel", true},
	{schema.GroupVersionResource{Group: "messaging.knative.dev", Version: "v1", Resource: "subscriptions"}, "Subscription", false},
	{schema.GroupVersionResource{Group: "flows.knative.dev", Version: "v1", Resource: "sequences"}, "Sequence", false},
	{schema.GroupVersionResource{Group: "flows.knative.dev", Version: "v1", Resource: "parallels"}, "Parallel", false},
	{schema.GroupVersionResource{Group: "sources.knative.dev", Version: "v1", Resource: "pingsources"}, "PingSource", false},
	{schema.GroupVersionResource{Group: "eventing.knative.dev", Version: "v1alpha1", Resource: "eventpolicies"}, "EventPolicy", true},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", false},
}

// errNotServed is wrapped by the error of a required resource the server does not serve.
var errNotServed = errors.New("not served by the API server (are Knative's CRDs installed?)")

// Watch reads the Knative objects from the API server of rc until ctx is done, like
// config.Watch reads files: it calls apply with the first configuration once the
// informers have synced, then with each changed one (every object stands alone: an
// invalid edit keeps the object's last good version, reported not ready). apply is called
// from one goroutine, one call at a time. Meanwhile the replica that holds the Lease
// writes the status of every object (Options.Status). Watch returns nil when ctx is
// done, or an error if it could not start (a required resource not served, the informers
// not synced before ctx ended).
func Watch(ctx context.Context, rc *rest.Config, apply func(*config.Config), onError func(error), opts Options) error {
	w, err := newWatcher(rc, opts)
	if err != nil {
		return err
	}
	return w.run(ctx, apply, onError)
}
