package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/kube"
)

// kubeFlags are the flags of `sluice serve --kubernetes`.
type kubeFlags struct {
	enabled       bool
	kubeconfig    string
	classes       []string
	addressURL    string
	leaseNS       string
	leaseName     string
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	statusEvery   time.Duration
}

func (k *kubeFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&k.enabled, "kubernetes", false, "read the Knative objects from the Kubernetes API server (in-cluster, or --kubeconfig) instead of --config, and write their status back (docs/kubernetes.md)")
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "with --kubernetes: a kubeconfig file, instead of the pod's service account")
	fl.StringSliceVar(&k.classes, "kubernetes-classes", []string{config.ClassSluice}, fmt.Sprintf("with --kubernetes: the broker classes to run, of %v; Brokers of other classes are left to their controllers", kube.Classes()))
	fl.StringVar(&k.addressURL, "kubernetes-address-url", "", "with --kubernetes: the base URL written as status.address of Brokers and channels, e.g. http://sluice.sluice.svc.cluster.local (default: the listen address)")
	fl.StringVar(&k.leaseNS, "leader-election-namespace", "", "with --kubernetes: namespace of the Lease the replicas elect the status writer on (default: $POD_NAMESPACE, then default)")
	fl.StringVar(&k.leaseName, "leader-election-name", kube.DefaultLeaseName, "with --kubernetes: name of that Lease")
	fl.DurationVar(&k.leaseDuration, "leader-election-lease-duration", kube.DefaultLeaseDuration, "with --kubernetes: how long a Lease lasts unrenewed: another replica takes over status writes within it")
	fl.DurationVar(&k.renewDeadline, "leader-election-renew-deadline", kube.DefaultRenewDeadline, "with --kubernetes: how long the leader tries to renew before it stops writing")
	fl.DurationVar(&k.retryPeriod, "leader-election-retry-period", kube.DefaultRetryPeriod, "with --kubernetes: how often the replicas try for the Lease")
	fl.DurationVar(&k.statusEvery, "kubernetes-status-interval", kube.DefaultStatusInterval, "with --kubernetes: how often the leader compares every object's status with what runs (it also does after each change) and writes what differs")
}

// check refuses flags that do not go together.
func (k *kubeFlags) check(changed func(string) bool, configFile string) error {
	if !k.enabled {
		for _, n := range []string{"kubeconfig", "kubernetes-classes", "kubernetes-address-url", "leader-election-namespace",
			"leader-election-name", "leader-election-lease-duration", "leader-election-renew-deadline",
			"leader-election-retry-period", "kubernetes-status-interval"} {
			if changed(n) {
				return fmt.Errorf("--%s is for --kubernetes", n)
			}
		}
		return nil
	}
	if configFile != "" {
		return errors.New("--kubernetes and --config: give one, not both: with --kubernetes every object is read from the API server (`kubectl apply -f` a file to add its objects there)")
	}
	for _, c := range k.classes {
		if !slices.Contains(kube.Classes(), c) {
			return fmt.Errorf("--kubernetes-classes: %q is not a broker class Sluice runs (%v)", c, kube.Classes())
		}
	}
	return nil
}

// watch runs kube.Watch with the flags until ctx is done.
func (k *kubeFlags) watch(ctx context.Context, cfgOpts []config.Option, status func() []config.ObjectStatus,
	apply func(*config.Config), onError func(error), log *slog.Logger) error {
	rc, err := kube.RESTConfig(k.kubeconfig)
	if err != nil {
		return err
	}
	return kube.Watch(ctx, rc, apply, onError, kube.Options{
		Classes:        k.classes,
		Config:         cfgOpts,
		Status:         status,
		StatusInterval: k.statusEvery,
		Election: kube.Election{Namespace: k.leaseNS, Name: k.leaseName,
			LeaseDuration: k.leaseDuration, RenewDeadline: k.renewDeadline, RetryPeriod: k.retryPeriod},
		Logger: log,
	})
}
