package config

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sluice-broker/sluice/filter"
)

// parsed is one object after its own validation (the first phase of a load): what it
// says, with its destinations not yet resolved. The second phase (resolve) joins the
// objects.
type parsed struct {
	status      ObjectStatus
	annotations map[string]string
	reasons     []string
	duplicate   bool // a second definition of a key: never used
	previous    bool // the last good version, standing in for an invalid edit

	cm      map[string]string // a ConfigMap's data
	broker  *brokerObj
	channel *channelObj
	trigger *triggerObj
	sub     *subObj
	seq     *seqObj
	par     *parObj
	ping    *pingObj
	policy  *policyObj
	rabbit  *rabbitmqBrokerConfigSpec // a RabbitmqBrokerConfig's spec
	labels  map[string]string
	maxRate float64       // sluice.dev/max-rate
	dedup   time.Duration // sluice.dev/dedup-window
	keep    time.Duration // sluice.dev/retention (retention.go)
	start   StartFrom     // sluice.dev/start-from (retention.go)
	paused  bool          // sluice.dev/paused
	own     Settings      // the backend annotations (backendAnnotations) it carries
}

// backendAnnotation is an annotation a backend reads: an object may carry it only when
// it runs on that backend, and its value goes to the backend in Broker.Settings.
type backendAnnotation struct {
	name, backend string
	what          string // what it gives, for the error: "has a Kinesis stream"
}

// backendAnnotations are the annotations backends read. A backend that reads one of its
// own adds a line here; the rest of its settings come from where Knative puts them.
func backendAnnotations() []backendAnnotation {
	return []backendAnnotation{
		{annotationStream, ChannelKinesis, "has a Kinesis stream"},
	}
}

// key is "Kind namespace/name".
func (p *parsed) key() string { return p.status.Key() }

func (p *parsed) fail(format string, args ...any) {
	p.reasons = append(p.reasons, fmt.Sprintf(format, args...))
}

func (p *parsed) failed() bool { return len(p.reasons) > 0 }

// skip marks a kind Sluice does not run.
func (p *parsed) skip(obj object) {
	p.status.Skipped = true
	group, _ := splitAPIVersion(obj.APIVersion)
	switch {
	case knativeGroup(group):
		p.status.Reason = fmt.Sprintf("Sluice does not run Knative's %s (%s); it is skipped", obj.Kind, obj.APIVersion)
	default:
		p.status.Reason = fmt.Sprintf("a %s (%s) is not an eventing object; Sluice skips it", obj.Kind, obj.APIVersion)
	}
}

// dest is a Destination as written, checked but not resolved.
type dest struct {
	path string // the field, e.g. "spec.subscriber"
	uri  string
	ref  *kref
	// caCerts (PEM) verify an https destination; audience names the OIDC token sent to
	// it. Sluice honours them on subscribers and dead-letter sinks.
	caCerts, audience string
}

type brokerObj struct {
	backend, headerEnc string
	class              string // the class annotation, "" when absent
	config             *kref  // spec.config
	externalTopic      string
	delivery           partialDelivery
	hasDelivery        bool // spec.delivery is set: config-br-defaults' delivery does not apply
}

type channelObj struct {
	backend, headerEnc string
	template           *tmpl    // a Channel's spec.channelTemplate
	settings           Settings // a KafkaChannel's topic
	delivery           partialDelivery
}

type triggerObj struct {
	broker     string
	brokerNS   string // the broker's namespace: spec.brokerRef's, else the trigger's
	brokerPath string // the field naming the broker, for messages
	attributes map[string]string
	filters    []filter.Spec
	filter     filter.Filter
	subscriber *dest
	delivery   partialDelivery
	ordered    bool
	batch      int
	batchWait  time.Duration
	caps       Caps // sluice.dev/max-delivery-rate and sluice.dev/max-in-flight
}

type subObj struct {
	channel           *kref
	subscriber, reply *dest
	delivery          partialDelivery
}

type seqStep struct {
	to       *dest
	delivery partialDelivery
}

type seqObj struct {
	steps    []seqStep
	template *tmpl
	reply    *dest
}

type parBranch struct {
	filter, subscriber, reply *dest
	delivery                  partialDelivery
}

type parObj struct {
	branches []parBranch
	template *tmpl
	reply    *dest
}

type pingObj struct {
	schedule, contentType string
	data                  []byte
	extensions            map[string]string
	sink                  *dest
}

// tmpl is a channel template: the backend it means and its topic settings.
type tmpl struct {
	kind     string
	backend  string
	settings Settings // a KafkaChannel's spec.numPartitions and spec.replicationFactor
}

// topicSettings are the settings a KafkaChannel's topic spec gives its backend: the
// fields set, as text.
func topicSettings(parts, rf int) Settings {
	var s Settings
	if parts > 0 {
		s = s.with("spec.numPartitions", strconv.Itoa(parts))
	}
	if rf > 0 {
		s = s.with("spec.replicationFactor", strconv.Itoa(rf))
	}
	return s
}

// with returns a copy of s with key set to v; s itself, when v is empty. Settings are
// shared once made, so they are never changed in place.
func (s Settings) with(key, v string) Settings {
	if v == "" {
		return s
	}
	out := make(Settings, len(s)+1)
	for k, x := range s {
		out[k] = x
	}
	out[key] = v
	return out
}

// annotation is the Settings key of the annotation a.
func annotation(a string) string { return "metadata.annotations." + a }

// merge returns s with every setting of t added; s or t itself when the other is empty.
func (s Settings) merge(t Settings) Settings {
	for k, v := range t {
		s = s.with(k, v)
	}
	return s
}

func newSpec(t reflect.Type) any { return reflect.New(t).Interface() }

func asTypeError(err error, te **json.UnmarshalTypeError) bool { return errors.As(err, te) }

// configMap keeps a ConfigMap's data.
func (p *parsed) configMap(obj object) {
	p.cm = map[string]string{}
	if len(obj.Data) > 0 && !bytes.Equal(obj.Data, []byte("null")) {
		if err := json.Unmarshal(obj.Data, &p.cm); err != nil {
			p.fail("data: must map keys to strings")
		}
	}
}

// spec validates the spec of a kind Sluice runs.
func (p *parsed) spec(obj object, spec any) {
	ann := obj.Metadata.Annotations
	backend := ann[annotationChannel]
	if backend != ChannelDefault && !slices.Contains(channels(), backend) {
		p.fail("metadata.annotations.%s: %q is not one of %s", annotationChannel, backend, strings.Join(channels(), ", "))
	}
	for _, a := range backendAnnotations() {
		v := ann[a.name]
		if v == "" {
			continue
		}
		if backend != a.backend {
			p.fail("metadata.annotations.%s: only a broker annotated %s: %s %s", a.name, annotationChannel, a.backend, a.what)
		}
		p.own = p.own.with(annotation(a.name), v)
	}
	enc := ann[annotationHeaderEncoding]
	switch enc {
	case "", "minimal":
		enc = HeaderEncodingMinimal
	case HeaderEncodingPercent:
	default:
		p.fail("metadata.annotations.%s: %q is not minimal or percent", annotationHeaderEncoding, enc)
	}
	addressable := false
	switch s := spec.(type) {
	case *brokerSpec:
		addressable = true
		b := &brokerObj{backend: backend, headerEnc: enc, class: ann[annotationClass],
			config: s.Config, externalTopic: ann[annotationExternalTopic]}
		if s.Config != nil { // its kind is checked with the class (classes.broker)
			if s.Config.Name == "" {
				p.fail("spec.config.name: required")
			}
		}
		b.delivery, b.hasDelivery = p.delivery("spec.delivery", s.Delivery), s.Delivery != nil
		p.broker = b
	case *channelSpec:
		addressable = true
		c := &channelObj{backend: backend, headerEnc: enc}
		if s.ChannelTemplate != nil {
			c.template = p.template("spec.channelTemplate", s.ChannelTemplate)
		}
		p.subscribers(s.Subscribers)
		c.delivery = p.delivery("spec.delivery", s.Delivery)
		p.channel = c
	case *inMemoryChannelSpec:
		addressable = true
		p.subscribers(s.Subscribers)
		p.channel = &channelObj{backend: p.impliedBackend(backend, ChannelMemory), headerEnc: enc,
			delivery: p.delivery("spec.delivery", s.Delivery)}
	case *kafkaChannelSpec:
		addressable = true
		p.subscribers(s.Subscribers)
		c := &channelObj{backend: p.impliedBackend(backend, ChannelKafka), headerEnc: enc,
			settings: topicSettings(s.NumPartitions, s.ReplicationFactor)}
		p.topic("spec", kafkaTopicSpec{s.NumPartitions, s.ReplicationFactor, s.RetentionDuration})
		c.delivery = p.delivery("spec.delivery", s.Delivery)
		p.channel = c
	case *rabbitmqBrokerConfigSpec:
		p.rabbitmqBrokerConfig(s)
	case *natsJetStreamChannelSpec:
		addressable = true
		p.subscribers(s.Subscribers)
		c := &channelObj{backend: p.impliedBackend(backend, ChannelJetStream), headerEnc: enc,
			settings: natsChannelSettings("spec", &s.natsTemplateSpec, func(m string) { p.fail("%s", m) })}
		c.delivery = p.delivery("spec.delivery", s.Delivery)
		p.channel = c
	case *triggerSpec:
		t := &triggerObj{broker: s.Broker, brokerNS: p.status.Namespace, brokerPath: "spec.broker"}
		switch r := s.BrokerRef; {
		case s.Broker == "" && r == nil:
			p.fail("spec.broker: required (or spec.brokerRef)")
		case s.Broker != "" && r != nil:
			p.fail("spec.broker, spec.brokerRef: give one or the other")
		case r != nil:
			t.broker, t.brokerPath = r.Name, "spec.brokerRef"
			if r.Namespace != "" {
				t.brokerNS = r.Namespace
			}
			group, _ := splitAPIVersion(r.APIVersion)
			switch {
			case r.Name == "":
				p.fail("spec.brokerRef.name: required")
			case r.Kind != kindBroker || group != groupEventing:
				p.fail("spec.brokerRef: %s %q is not a Broker; want {apiVersion: %s, kind: %s, name, namespace}", r.APIVersion, r.Kind, apiEventing, kindBroker)
			}
			if msg := dnsLabel(r.Namespace); r.Namespace != "" && msg != "" {
				p.fail("spec.brokerRef.namespace: %q %s", r.Namespace, msg)
			}
		}
		if s.Filter != nil {
			t.attributes = s.Filter.Attributes
		}
		t.filters = s.Filters
		f, err := filter.Compile(t.attributes, t.filters)
		if err != nil {
			for _, e := range unjoin(err) {
				p.fail("spec.%v", e)
			}
		}
		t.filter = f
		t.subscriber = p.dest("spec.subscriber", s.Subscriber, true)
		t.delivery = p.delivery("spec.delivery", s.Delivery)
		switch v := ann[annotationOrdering]; v {
		case "", "unordered":
		case "ordered":
			t.ordered = true
		default:
			p.fail("metadata.annotations.%s: %q is not ordered or unordered", annotationOrdering, v)
		}
		t.batch, t.batchWait = p.batchAnnotations(ann)
		p.trigger = t
	case *subscriptionSpec:
		sub := &subObj{channel: s.Channel}
		if s.Channel == nil || s.Channel.Name == "" {
			p.fail("spec.channel.name: required")
		}
		sub.subscriber = p.dest("spec.subscriber", s.Subscriber, false)
		sub.reply = p.dest("spec.reply", s.Reply, false)
		if sub.subscriber == nil && sub.reply == nil {
			p.fail("spec.subscriber: required (or spec.reply, to forward events unchanged)")
		}
		sub.delivery = p.delivery("spec.delivery", s.Delivery)
		p.sub = sub
	case *sequenceSpec:
		addressable = true
		q := &seqObj{}
		if len(s.Steps) == 0 {
			p.fail("spec.steps: at least one step is required")
		}
		for i, st := range s.Steps {
			path := fmt.Sprintf("spec.steps[%d]", i)
			d := st.destination
			q.steps = append(q.steps, seqStep{to: p.dest(path, &d, true), delivery: p.delivery(path+".delivery", st.Delivery)})
		}
		if s.ChannelTemplate != nil {
			q.template = p.template("spec.channelTemplate", s.ChannelTemplate)
		}
		q.reply = p.dest("spec.reply", s.Reply, false)
		p.seq = q
	case *parallelSpec:
		addressable = true
		q := &parObj{}
		if len(s.Branches) == 0 {
			p.fail("spec.branches: at least one branch is required")
		}
		for i, br := range s.Branches {
			path := fmt.Sprintf("spec.branches[%d]", i)
			q.branches = append(q.branches, parBranch{
				filter:     p.dest(path+".filter", br.Filter, false),
				subscriber: p.dest(path+".subscriber", br.Subscriber, true),
				reply:      p.dest(path+".reply", br.Reply, false),
				delivery:   p.delivery(path+".delivery", br.Delivery),
			})
		}
		if s.ChannelTemplate != nil {
			q.template = p.template("spec.channelTemplate", s.ChannelTemplate)
		}
		q.reply = p.dest("spec.reply", s.Reply, false)
		p.par = q
	case *pingSourceSpec:
		p.ping = p.pingSource(s)
	case *eventPolicySpec:
		p.policy = p.eventPolicy(s)
	}
	if v := ann[annotationMaxRate]; v != "" {
		r, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil || r <= 0 || math.IsInf(r, 0) || math.IsNaN(r):
			p.fail("metadata.annotations.%s: %q is not a positive number of events a second", annotationMaxRate, v)
		case p.broker == nil && p.channel == nil:
			p.fail("metadata.annotations.%s: only for Brokers and channels", annotationMaxRate)
		default:
			p.maxRate = r
		}
	}
	p.dedupAndPause(ann)
	p.retention(ann)
	p.startFrom(ann)
	p.capAnnotations(ann)
	if !addressable {
		names := []string{annotationChannel}
		for _, a := range backendAnnotations() {
			names = append(names, a.name)
		}
		for _, a := range append(names, annotationHeaderEncoding) {
			if ann[a] != "" {
				p.fail("metadata.annotations.%s: only for Brokers, channels, Sequences and Parallels", a)
			}
		}
	}
}

// impliedBackend is the backend a channel kind implies, rejecting a conflicting
// sluice.dev/channel annotation.
func (p *parsed) impliedBackend(annotated, implied string) string {
	if annotated != "" && annotated != implied {
		p.fail("metadata.annotations.%s: %q conflicts with the %s backend of a %s", annotationChannel, annotated, implied, p.status.Kind)
	}
	return implied
}

// subscribers accepts a channel's spec.subscribers as Knative's controller writes them
// (every entry has a uid: it mirrors a Subscription, which Sluice reads instead).
func (p *parsed) subscribers(raw json.RawMessage) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return
	}
	var subs []subscriberSpec
	if err := json.Unmarshal(raw, &subs); err != nil {
		p.fail("spec.subscribers: must be a list")
		return
	}
	for i, s := range subs {
		if len(s.UID) == 0 {
			p.fail("spec.subscribers[%d]: supported by Knative, not by Sluice: write a Subscription (Knative's controller fills spec.subscribers from Subscriptions)", i)
		}
	}
}

// template checks a channel template and says what backend it means.
func (p *parsed) template(path string, t *channelTemplate) *tmpl {
	group, version := splitAPIVersion(t.APIVersion)
	switch {
	case t.Kind == kindInMemory && group == groupMessaging && (version == "v1" || version == "v1beta1"):
		p.templateSpec(path+".spec", t.Spec, reflect.TypeFor[inMemoryChannelSpec](), nil)
		return &tmpl{kind: kindInMemory, backend: ChannelMemory}
	case t.Kind == kindKafkaChannel && group == groupMessaging && version == "v1beta1":
		var ks kafkaTopicSpec
		p.templateSpec(path+".spec", t.Spec, reflect.TypeFor[kafkaTopicSpec](), &ks)
		p.topic(path+".spec", ks)
		return &tmpl{kind: kindKafkaChannel, backend: ChannelKafka, settings: topicSettings(ks.NumPartitions, ks.ReplicationFactor)}
	case t.Kind == kindNatsJetStream && group == groupMessaging && version == "v1alpha1":
		var ts natsTemplateSpec
		p.templateSpec(path+".spec", t.Spec, reflect.TypeFor[natsTemplateSpec](), &ts)
		return &tmpl{kind: kindNatsJetStream, backend: ChannelJetStream,
			settings: natsChannelSettings(path+".spec", &ts, func(m string) { p.fail("%s", m) })}
	}
	p.fail("%s: %s %q is not supported; use %s %s, %s %s or %s %s",
		path, t.APIVersion, t.Kind, apiMessaging, kindInMemory, apiMessagingBeta, kindKafkaChannel, apiMessagingNats, kindNatsJetStream)
	return nil
}

// templateSpec checks a channelTemplate's spec against t and decodes it into v.
func (p *parsed) templateSpec(path string, raw json.RawMessage, t reflect.Type, v any) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return
	}
	var generic any
	_ = json.Unmarshal(raw, &generic)
	checkFields(path, generic, t, func(path, reason string) { p.fail("%s: %s", path, reason) })
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			p.fail("%s", typeError(path, err))
		}
	}
}

// kafkaDefaultRetention is the retention of the topics Sluice creates: the Kafka
// broker's default (log.retention.hours=168), which is also KafkaChannel's default
// retentionDuration.
const kafkaDefaultRetention = 168 * time.Hour

// topic checks a KafkaChannel's topic settings.
func (p *parsed) topic(path string, s kafkaTopicSpec) {
	if s.NumPartitions < 0 {
		p.fail("%s.numPartitions: must not be negative", path)
	}
	if s.ReplicationFactor < 0 {
		p.fail("%s.replicationFactor: must not be negative", path)
	}
	if s.RetentionDuration != nil {
		d, err := ParseDuration(*s.RetentionDuration)
		switch {
		case err != nil:
			p.fail("%s.retentionDuration: %v", path, err)
		case d != kafkaDefaultRetention:
			p.fail("%s.retentionDuration: %q: supported by Knative, not by Sluice: topics keep the Kafka cluster's retention (PT168H by default)", path, *s.RetentionDuration)
		}
	}
}

// dest checks a Destination at path: a ref ({apiVersion, kind, name}), a uri (absolute
// http or https without a ref, relative to the ref's address with one), or both.
func (p *parsed) dest(path string, d *destination, required bool) *dest {
	if d == nil || (d.Ref == nil && d.URI == "") {
		if required {
			p.fail("%s: required: a ref or a uri", path)
		}
		return nil
	}
	out := &dest{path: path, uri: d.URI, ref: d.Ref}
	if d.CACerts != nil {
		out.caCerts = *d.CACerts
		if !x509.NewCertPool().AppendCertsFromPEM([]byte(out.caCerts)) {
			p.fail("%s.CACerts: no PEM certificate in it", path)
		}
	}
	if d.Audience != nil {
		if out.audience = *d.Audience; out.audience == "" {
			p.fail("%s.audience: empty", path)
		}
	}
	if r := d.Ref; r != nil {
		if r.Kind == "" {
			p.fail("%s.ref.kind: required", path)
		}
		if r.Name == "" {
			p.fail("%s.ref.name: required", path)
		}
		if r.APIVersion == "" {
			p.fail("%s.ref.apiVersion: required", path)
		}
		if r.Namespace != "" && dnsLabel(r.Namespace) != "" {
			p.fail("%s.ref.namespace: %q %s", path, r.Namespace, dnsLabel(r.Namespace))
		}
	}
	if d.URI != "" {
		u, err := url.Parse(d.URI)
		switch {
		case err != nil:
			p.fail("%s.uri: %q is not a URL: %v", path, d.URI, err)
		case d.Ref != nil && u.IsAbs():
			p.fail("%s.uri: %q must be relative (a path) beside a ref; it is resolved against the ref's address", path, d.URI)
		case d.Ref == nil && ((u.Scheme != "http" && u.Scheme != "https") || u.Host == ""):
			p.fail("%s.uri: %q is not an absolute http or https URL", path, d.URI)
		}
	}
	return out
}

// pingSource checks a PingSource's spec.
func (p *parsed) pingSource(s *pingSourceSpec) *pingObj {
	o := &pingObj{contentType: s.ContentType}
	sched := s.Schedule
	if sched == "" {
		sched = "* * * * *" // Knative's default
	}
	if s.Timezone != "" {
		if _, err := time.LoadLocation(s.Timezone); err != nil {
			p.fail("spec.timezone: %q is not a time zone of the tz database: %v", s.Timezone, err)
		} else if strings.HasPrefix(sched, "CRON_TZ=") || strings.HasPrefix(sched, "TZ=") {
			p.fail("spec.timezone: give the time zone here or as CRON_TZ= in spec.schedule, not both")
		} else {
			sched = "CRON_TZ=" + s.Timezone + " " + sched
		}
	}
	if _, err := cron.ParseStandard(sched); err != nil {
		p.fail("spec.schedule: %q is not a cron schedule: %v", s.Schedule, err)
	}
	o.schedule = sched
	switch {
	case s.Data != "" && s.DataBase64 != "":
		p.fail("spec.data, spec.dataBase64: give one or the other")
	case s.DataBase64 != "":
		b, err := base64.StdEncoding.DecodeString(s.DataBase64)
		if err != nil {
			p.fail("spec.dataBase64: not base64: %v", err)
		}
		o.data = b
	case s.Data != "":
		o.data = []byte(s.Data)
	}
	if s.CEOverrides != nil {
		for k := range s.CEOverrides.Extensions {
			if !extensionName(k) {
				p.fail("spec.ceOverrides.extensions.%s: not a CloudEvents attribute name (lower-case letters and digits)", k)
			}
		}
		o.extensions = s.CEOverrides.Extensions
	}
	o.sink = p.dest("spec.sink", s.Sink, true)
	return o
}

// extensionName reports whether s is a valid CloudEvents attribute name and not one of
// the context attributes.
func extensionName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') {
			return false
		}
	}
	switch s {
	case "specversion", "id", "source", "type", "datacontenttype", "dataschema", "subject", "time", "data", "data_base64":
		return false
	}
	return true
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
