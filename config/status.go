package config

// ObjectStatus is one object of the configuration as Sluice sees it, the way `kubectl
// get` shows a Knative object: ready or not and why. `sluice validate`, `sluice status`
// and GET /status print these.
type ObjectStatus struct {
	// APIVersion and Kind are the object's, as written.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace and Name identify the object; Namespace defaults to "default".
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// File is the file the object was read from, and Document its position there
	// (1-based; items of a List count as documents of their own).
	File     string `json:"file"`
	Document int    `json:"document"`
	// Ready is true when Sluice runs the object as written.
	Ready bool `json:"ready"`
	// Skipped is true for a kind Sluice does not run (a Deployment, a Namespace…); such
	// an object is neither ready nor an error.
	Skipped bool `json:"skipped,omitempty"`
	// Reason says why the object is not ready or was skipped, naming the field; on a
	// ready object it may note something the user should know (an invalid edit that was
	// not applied, for example).
	Reason string `json:"reason,omitempty"`
	// Address is where events for the object are posted, for a Broker, a channel, a
	// Sequence or a Parallel: "http://<ingress>/<namespace>/<name>".
	Address string `json:"address,omitempty"`
	// Channel is the channel backend a Broker, channel, Sequence or Parallel runs on
	// ("memory", "kafka"…; "" is the server's --channel).
	Channel string `json:"channel,omitempty"`
	// Refs are the object's resolved destinations, in field order.
	Refs []Resolution `json:"refs,omitempty"`
	// FlowChannels are the channels a Sequence (one per step) or a Parallel (its
	// ingress, then one per branch) runs on now, in that order, named as Knative's
	// controllers name the channels they create; empty while none runs.
	FlowChannels []FlowChannel `json:"flowChannels,omitempty"`

	reasons []string // Reason, one entry per problem
}

// FlowChannel is one channel a Sequence or Parallel runs on, and the subscriptions on
// it, named as Knative's controllers name the ones they create.
type FlowChannel struct {
	// APIVersion and Kind are the channel's kind, from the channel template.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name is the channel's name, in the flow's namespace.
	Name string `json:"name"`
	// Subscriptions are the names of the subscriptions on the channel: a Sequence's
	// step's one, a Parallel's branch's one, or, on a Parallel's ingress, the filter
	// subscription of each branch in order.
	Subscriptions []string `json:"subscriptions"`
	// Ready is false when the channel is not running now (its backend down), and
	// Reason says why.
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// Resolution is one resolved Destination of an object.
type Resolution struct {
	// Field is the Destination's path, e.g. "spec.subscriber".
	Field string `json:"field"`
	// Ref is the reference as written, "apiVersion kind namespace/name"; empty for a
	// plain uri.
	Ref string `json:"ref,omitempty"`
	// URL is where events go.
	URL string `json:"url"`
	// Via says how the ref was resolved: ViaConfig, ViaRefsFile, ViaMapping, ViaCluster,
	// ViaTemplate or ViaURI.
	Via string `json:"via"`
}

// The values of Resolution.Via.
const (
	ViaURI      = "uri"                // a plain uri, no ref
	ViaConfig   = "config"             // an object of the configuration: its Sluice address
	ViaRefsFile = "refs-file"          // an entry of the --refs file
	ViaTemplate = "template"           // the --ref-url-template (Knative's in-cluster address of a Service)
	ViaMapping  = "kreference-mapping" // a template of Knative's config-kreference-mapping
	ViaCluster  = "cluster"            // the referenced object in the cluster (WithRefResolver)
)

// Key returns "Kind namespace/name".
func (o ObjectStatus) Key() string { return o.Kind + " " + o.Namespace + "/" + o.Name }

// where names the object in messages: "file: Kind ns/name".
func (o ObjectStatus) where() string {
	if o.Name == "" || o.Kind == "" {
		if o.Kind == "" {
			return o.File + ": document " + itoa(o.Document)
		}
		return o.File + ": " + o.Kind + " (document " + itoa(o.Document) + ")"
	}
	return o.File + ": " + o.Key()
}
