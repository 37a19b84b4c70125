package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluice-broker/sluice/config"
)

func newValidateCmd() *cobra.Command {
	var (
		k      knativeFlags
		output string
		ingest string
	)
	cmd := &cobra.Command{
		Use:   "validate FILE|DIR...",
		Short: "Check Knative manifests: every object, ready or not and why",
		Long: `Read Knative manifests as 'sluice serve' would and print every object with READY and
REASON columns, like 'kubectl get'. Files and directories are read together, as one
configuration. Kinds Sluice does not run (Deployments, Services, Namespaces...) are
listed as Skipped. The exit status is 1 if any object is not ready.`,
		Example: `  sluice validate examples/demo.yaml
  sluice validate -o wide --refs refs.yaml k8s/
  kubectl get brokers,triggers,subscriptions,channels -A -o yaml | sluice validate /dev/stdin`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Read(args, k.options(ingest)...)
			if err != nil {
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
	fl.StringVarP(&output, "output", "o", "table", "table, wide (with channel, address and resolved refs) or json")
	fl.StringVar(&ingest, "ingress-url", config.DefaultIngressURL, "base URL of Sluice's ingress, which refs to brokers and channels of the configuration resolve to")
	return cmd
}
