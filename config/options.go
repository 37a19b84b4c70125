package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/template"
)

// Defaults of the options below.
const (
	// DefaultIngressURL is the base of the Sluice addresses refs to objects of the
	// configuration resolve to: `sluice serve`'s default --addr.
	DefaultIngressURL = "http://127.0.0.1:8080"
	// DefaultRefURLTemplate is the address Knative itself resolves a ref to a Service in
	// the cluster to, so that Sluice deployed inside the cluster needs no refs file.
	DefaultRefURLTemplate = "http://{{.Name}}.{{.Namespace}}.svc.cluster.local"
)

// Option configures Read, Load and Watch.
type Option func(*options)

type options struct {
	ingressURL  string
	refsFile    string
	refTemplate string
	previous    *Config
	resolver    RefResolver
}

// WithIngressURL sets the base URL of Sluice's own ingress ("http://host:port"), which
// refs to a Broker, channel, Sequence or Parallel of the configuration resolve to.
// Default DefaultIngressURL.
func WithIngressURL(u string) Option { return func(o *options) { o.ingressURL = u } }

// WithRefsFile names a YAML file of explicit ref addresses: a list of {apiVersion, kind,
// namespace, name, url}. An entry wins over the template; Watch watches the file too.
func WithRefsFile(path string) Option { return func(o *options) { o.refsFile = path } }

// WithRefURLTemplate sets the text/template that makes the URL of a ref to a Service (a
// core v1 Service or a serving.knative.dev/v1 Service) that is not in the refs file;
// refs to other kinds never use it. It sees .APIVersion, .Group, .Kind, .Namespace and
// .Name (lower-cased kind as .Resource). Default DefaultRefURLTemplate.
func WithRefURLTemplate(t string) Option { return func(o *options) { o.refTemplate = t } }

// WithPrevious gives the configuration now running: an object that was valid in it and
// is invalid now keeps its previous version (reported not ready, with the reason). Watch
// passes it on every reload.
func WithPrevious(c *Config) Option { return func(o *options) { o.previous = c } }

// RefResolver resolves a ref that is not an object of the configuration, an entry of the
// refs file or a template of config-kreference-mapping: `sluice serve --kubernetes`
// resolves one from the referenced object in the cluster. It returns the ref's URL and
// true; false if it does not resolve refs of that kind (the ref resolves as without it);
// or an error saying why the ref does not resolve now (the object naming it is not
// ready, with that reason).
type RefResolver func(apiVersion, kind, namespace, name string) (url string, ok bool, err error)

// WithRefResolver resolves the refs that nothing of the configuration resolves with f,
// before --ref-url-template; Resolution.Via is ViaCluster.
func WithRefResolver(f RefResolver) Option { return func(o *options) { o.resolver = f } }

// settings are the checked options.
type settings struct {
	ingress  string
	template *template.Template
	refsFile string
	previous *Config
	resolver RefResolver
}

// newSettings applies and checks opts: the error names the bad option.
func newSettings(opts []Option) (*settings, error) {
	o := options{ingressURL: DefaultIngressURL, refTemplate: DefaultRefURLTemplate}
	for _, opt := range opts {
		opt(&o)
	}
	var errs []error
	u, err := url.Parse(o.ingressURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("config: WithIngressURL(%q): want an absolute http or https URL", o.ingressURL))
	}
	t, err := template.New("ref-url").Option("missingkey=error").Parse(o.refTemplate)
	if err == nil {
		// Render a sample, so that a template naming a field that does not exist fails now.
		var b bytes.Buffer
		if err = t.Execute(&b, refData{APIVersion: "v1", Kind: "Service", Resource: "service", Namespace: "ns", Name: "n"}); err == nil {
			if _, perr := url.Parse(b.String()); perr != nil || !strings.HasPrefix(b.String(), "http") {
				err = fmt.Errorf("renders %q, not an http or https URL", b.String())
			}
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("config: WithRefURLTemplate(%q): %w", o.refTemplate, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &settings{ingress: strings.TrimSuffix(o.ingressURL, "/"), template: t, refsFile: o.refsFile, previous: o.previous, resolver: o.resolver}, nil
}

// refData is what the ref URL template sees.
type refData struct {
	APIVersion, Group, Kind, Resource, Namespace, Name string
}
