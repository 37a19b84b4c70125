package cli

import (
	"log/slog"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"github.com/sluice-broker/sluice/config"
	"github.com/sluice-broker/sluice/internal/redact"
)

// knativeFlags are how Knative references resolve: --refs and --ref-url-template, for
// serve and validate.
type knativeFlags struct {
	refs        string
	refTemplate string
}

func (k *knativeFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&k.refs, "refs", "", "YAML list of {apiVersion, kind, namespace, name, url}: where refs to objects outside the configuration go (watched)")
	fl.StringVar(&k.refTemplate, "ref-url-template", config.DefaultRefURLTemplate, "URL of a ref to a Service (v1 or serving.knative.dev/v1) not in --refs (Go template of .Name, .Namespace, .Kind, .APIVersion, .Group, .Resource); the default is the in-cluster address Knative uses")
}

// options are the config options of the flags, with ingress as Sluice's own base URL.
func (k *knativeFlags) options(ingress string) []config.Option {
	return []config.Option{
		config.WithIngressURL(ingress),
		config.WithRefsFile(k.refs),
		config.WithRefURLTemplate(k.refTemplate),
	}
}

// configLog logs what a load means, once: every object not ready (error), every kind
// skipped (info), and every resolved ref (info), each again only when it changes.
type configLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]string // "Kind ns/name" → what was last logged
}

func newConfigLog(log *slog.Logger) *configLog {
	return &configLog{log: log, seen: map[string]string{}}
}

func (c *configLog) report(cfg *config.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := make(map[string]string, len(cfg.Objects))
	for _, o := range cfg.Objects {
		key := o.Key()
		var sig strings.Builder
		sig.WriteString(o.Reason)
		for _, r := range o.Refs {
			sig.WriteString("|" + r.Field + "=" + r.URL)
		}
		now[key] = sig.String()
		if prev, ok := c.seen[key]; ok && prev == now[key] {
			continue
		}
		switch {
		case o.Skipped:
			c.log.Info("skipped: not a kind Sluice runs", "object", key, "file", o.File, "reason", redact.Text(o.Reason))
		case !o.Ready:
			c.log.Error("object not ready", "object", key, "file", o.File, "reason", redact.Text(o.Reason))
		case o.Reason != "": // ready, with a note (an older apiVersion read as the current one)
			c.log.Warn("object ready with a note", "object", key, "file", o.File, "reason", redact.Text(o.Reason))
		}
		for _, r := range o.Refs {
			if r.Via == config.ViaURI {
				continue
			}
			c.log.Info("ref resolved", "object", key, "field", r.Field, "ref", r.Ref, "url", redact.URL(r.URL), "via", r.Via)
		}
	}
	c.seen = now
}
