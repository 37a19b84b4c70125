package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"sigs.k8s.io/yaml"
)

// RefEntry is one entry of a refs file (`sluice serve --refs FILE`): the address of an
// object a Destination's ref may name, typically a Service outside the configuration.
//
//   - apiVersion: serving.knative.dev/v1
//     kind: Service
//     namespace: default
//     name: event-display
//     url: http://127.0.0.1:9000/
type RefEntry struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	URL        string `json:"url"`
}

// readRefs reads and checks a refs file; "" reads nothing.
func readRefs(path string) ([]RefEntry, error) {
	if path == "" {
		return nil, nil
	}
	b, err := readBounded(path, MaxConfigBytes, "is")
	if err != nil {
		return nil, fmt.Errorf("config: refs file: %w", err)
	}
	return parseRefs(path, b)
}

func parseRefs(path string, b []byte) ([]RefEntry, error) {
	var refs []RefEntry
	if n := expandedSize(b, MaxExpandedBytes); n > MaxExpandedBytes {
		return nil, fmt.Errorf("config: refs file %s: expands to more than %s with its YAML aliases (config.MaxExpandedBytes)", path, mib(MaxExpandedBytes))
	}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := yaml.UnmarshalStrict(b, &refs); err != nil {
			return nil, fmt.Errorf("config: refs file %s: want a YAML list of {apiVersion, kind, namespace, name, url}: %w", path, err)
		}
	}
	var errs []error
	for i := range refs {
		e := &refs[i]
		if e.Namespace == "" {
			e.Namespace = "default"
		}
		u, err := url.Parse(e.URL)
		switch {
		case e.Kind == "" || e.Name == "":
			errs = append(errs, fmt.Errorf("config: refs file %s: entry %d: kind and name are required", path, i+1))
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			errs = append(errs, fmt.Errorf("config: refs file %s: entry %d (%s %s/%s): url %q is not an absolute http or https URL",
				path, i+1, e.Kind, e.Namespace, e.Name, e.URL))
		}
	}
	return refs, errors.Join(errs...)
}

// addressable kinds: a ref to one of these in the configuration resolves to its Sluice
// address.
var addressable = map[string]string{
	kindBroker:        groupEventing,
	kindChannel:       groupMessaging,
	kindInMemory:      groupMessaging,
	kindKafkaChannel:  groupMessaging,
	kindNatsJetStream: groupMessaging,
	kindSequence:      groupFlows,
	kindParallel:      groupFlows,
}

// serviceKind reports whether a ref names a kind whose address is its cluster Service,
// the only kinds --ref-url-template makes an address for: a core v1 Service and a
// Knative Service (serving.knative.dev/v1).
func serviceKind(apiVersion, kind string) bool {
	return kind == "Service" && (apiVersion == "v1" || apiVersion == "serving.knative.dev/v1")
}

// resolver turns Destinations into URLs.
type resolver struct {
	st        *settings
	refs      []RefEntry
	mapping   refMapping
	addresses map[string]string       // "Kind ns/name" → Sluice address, of ready objects
	declared  map[string]bool         // "Kind ns/name" of every object of the configuration
	skipped   map[string]ObjectStatus // "Kind ns/name" of the objects Sluice skipped
}

// address is the Sluice ingress address of the object at ns/name.
func (r *resolver) address(ns, name string) string { return r.st.ingress + "/" + ns + "/" + name }

// why says why no object of kind at ns/name runs: it was skipped (naming its file and
// the reason it was skipped) or it is not in the configuration.
func (r *resolver) why(kind, ns, name string) string {
	if s, ok := r.skipped[kind+" "+ns+"/"+name]; ok {
		return fmt.Sprintf("%s %s/%s (%s, %s document %d): %s", kind, ns, name, s.APIVersion, s.File, s.Document, s.Reason)
	}
	return fmt.Sprintf("%s %s/%s is not in the configuration", kind, ns, name)
}

// resolve resolves d, written in an object of namespace ns: to an object of the
// configuration, an entry of --refs, a template of config-kreference-mapping, or, for a
// Service, --ref-url-template; any other ref is an error naming it.
func (r *resolver) resolve(d *dest, ns string) (Resolution, error) {
	res := Resolution{Field: d.path}
	if d.ref == nil {
		res.URL, res.Via = d.uri, ViaURI
		return res, nil
	}
	ref := *d.ref
	if ref.Namespace == "" {
		ref.Namespace = ns
	}
	res.Ref = fmt.Sprintf("%s %s %s/%s", ref.APIVersion, ref.Kind, ref.Namespace, ref.Name)
	group, _ := splitAPIVersion(ref.APIVersion)
	base := ""
	key := ref.Kind + " " + ref.Namespace + "/" + ref.Name
	if g, ok := addressable[ref.Kind]; ok && g == group {
		if a, ok := r.addresses[key]; ok {
			base, res.Via = a, ViaConfig
		} else if r.declared[key] {
			// In the configuration but not running: no address to send to.
			return res, fmt.Errorf("%s.ref: %s is not ready", d.path, key)
		}
	}
	if base == "" {
		for _, e := range r.refs {
			eg, _ := splitAPIVersion(e.APIVersion)
			if e.Kind == ref.Kind && e.Name == ref.Name && e.Namespace == ref.Namespace && (e.APIVersion == "" || eg == group) {
				base, res.Via = e.URL, ViaRefsFile
				break
			}
		}
	}
	if base == "" {
		u, ok, err := r.mapping.resolve(ref)
		if err != nil {
			return res, fmt.Errorf("%s.ref: %w", d.path, err)
		}
		if ok {
			base, res.Via = u, ViaMapping
		}
	}
	if base == "" && r.st.resolver != nil {
		u, ok, err := r.st.resolver(ref.APIVersion, ref.Kind, ref.Namespace, ref.Name)
		if err != nil {
			return res, fmt.Errorf("%s.ref: %w", d.path, err)
		}
		if ok {
			if pu, perr := url.Parse(u); perr != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				return res, fmt.Errorf("%s.ref: %s %s/%s: address %q is not an absolute http or https URL", d.path, ref.Kind, ref.Namespace, ref.Name, u)
			}
			base, res.Via = u, ViaCluster
		}
	}
	if base == "" {
		if !serviceKind(ref.APIVersion, ref.Kind) {
			if _, ok := r.skipped[key]; ok {
				return res, fmt.Errorf("%s.ref: %s; give its address in --refs or %s", d.path, r.why(ref.Kind, ref.Namespace, ref.Name), mappingWhere)
			}
			if g, ok := addressable[ref.Kind]; ok && g == group {
				return res, fmt.Errorf("%s.ref: %s or --refs", d.path, r.why(ref.Kind, ref.Namespace, ref.Name))
			}
			return res, fmt.Errorf("%s.ref: %s %s %s/%s is not in --refs or %s; only a Service (v1 or serving.knative.dev/v1) is addressed by --ref-url-template",
				d.path, ref.APIVersion, ref.Kind, ref.Namespace, ref.Name, mappingWhere)
		}
		var b bytes.Buffer
		err := r.st.template.Execute(&limitedWriter{w: &b, n: MaxRefURLBytes}, refData{
			APIVersion: ref.APIVersion, Group: group, Kind: ref.Kind, Resource: strings.ToLower(ref.Kind),
			Namespace: ref.Namespace, Name: ref.Name,
		})
		if err != nil {
			return res, fmt.Errorf("%s.ref: the ref URL template: %w", d.path, err)
		}
		base, res.Via = b.String(), ViaTemplate
	}
	if d.uri == "" {
		res.URL = base
		return res, nil
	}
	bu, err := url.Parse(base)
	if err != nil {
		return res, fmt.Errorf("%s.ref: address %q is not a URL: %w", d.path, base, err)
	}
	rel, err := url.Parse(d.uri)
	if err != nil {
		return res, fmt.Errorf("%s.uri: %w", d.path, err)
	}
	res.URL = bu.ResolveReference(rel).String()
	return res, nil
}
