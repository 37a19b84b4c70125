package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/channel/registry"
	"github.com/sluice-broker/sluice/config"
)

func newValidateCmd() *cobra.Command {
	var (
		k      knativeFlags
		output string
		ingest string
		chans  = registry.New() // the channel flags of serve: --channel, --kafka-brokers...
	)
	cmd := &cobra.Command{
		Use:   "validate FILE|DIR...",
		Short: "Check Knative manifests: every object, ready or not and why",
		Long: `Read Knative manifests as 'sluice serve' would and print every object with READY and
REASON columns, like 'kubectl get'. Files and directories are read together, as one
configuration. Kinds Sluice does not run (Deployments, Services, Namespaces...) are
listed as Skipped. The exit status is 1 if any object is not ready.

It takes serve's channel flags (--channel, --kafka-brokers, --nats-url, --data-dir,
--kinesis-checkpoint-dir...) and reads them as serve does, without connecting to
anything: an object whose channel backend the flags given do not configure is noted
"readiness depends on --kafka-brokers ..., not given" (serve with the same flags would
not run it). Whether the backend can be reached is known only at run time: see
'sluice status'.`,
		Example: `  sluice validate examples/demo.yaml
  sluice validate -o wide --refs refs.yaml k8s/
  kubectl get brokers,triggers,subscriptions,channels -A -o yaml | sluice validate /dev/stdin`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Read(args, k.options(ingest)...)
			if err != nil {
				return err
			}
			if err := noteChannelFlags(cfg, chans); err != nil {
				return err
			}
			if err := printObjects(cmd.OutOrStdout(), cfg.Objects, output); err != nil {
				return err
			}
			if !cfg.Ready() {
				n := 0
				for _, o := range cfg.Objects {
					if !o.Ready && !o.Skipped {
						n++
					}
				}
				return withExitCode(1, fmt.Errorf("%d of %d objects are not ready", n, len(cfg.Objects)))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	k.register(fl)
	chans.Flags(fl)
	fl.StringVarP(&output, "output", "o", "table", "table, wide (with channel, address and resolved refs) or json")
	fl.StringVar(&ingest, "ingress-url", config.DefaultIngressURL, "base URL of Sluice's ingress, which refs to brokers and channels of the configuration resolve to")
	return cmd
}

// noteChannelFlags notes on every ready object whose channel backend the channel flags
// given do not configure (a Broker, a channel, a Sequence or Parallel, and the Triggers
// and Subscriptions on them) that its readiness depends on the flag that would: serve
// with these flags would not run it. A --channel the flags do not configure is serve's
// error.
func noteChannelFlags(cfg *config.Config, chans *registry.Registry) error {
	notes := map[string]string{} // "Kind ns/name" → the flag not given
	for _, b := range cfg.Brokers {
		need, err := chans.Needs(b)
		if err != nil {
			return err
		}
		if need == "" {
			continue
		}
		if b.Owner != "" {
			notes[b.Owner] = need
			continue
		}
		notes[b.Kind+" "+b.Key()] = need
		for _, t := range b.Triggers {
			notes[t.Kind+" "+t.Key()] = need
		}
	}
	for i, o := range cfg.Objects {
		need, ok := notes[o.Key()]
		if !ok || !o.Ready {
			continue
		}
		note := "readiness depends on " + need + ", not given"
		if o.Reason != "" {
			note = o.Reason + "; " + note
		}
		cfg.Objects[i].Reason = note
	}
	return nil
}
