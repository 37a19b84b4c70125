package config

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-broker/sluice/filter"
)

// node is an addressable object being built: a Broker, a channel, or a channel a
// Sequence or Parallel is made of.
type node struct {
	Broker
	owner    *parsed // the object it is, or belongs to
	delivery partialDelivery
	tmplKind string // a Channel's template kind, which Subscriptions may name
}

// resolve is the second phase of a load: it joins the objects (triggers to brokers,
// subscriptions to channels, refs to addresses), lowers Sequences and Parallels into
// channels and subscriptions, and writes every object's status into cfg.
func (l *loader) resolve(cfg *Config) {
	cfg.InvalidEventPolicies = l.invalidPolicies() // before last good versions stand in
	invalidPolicy := map[string]bool{}
	for _, p := range l.objects {
		if p.failed() && strings.EqualFold(p.status.Kind, kindEventPolicy) {
			invalidPolicy[policyAt(p.status)] = true
		}
	}
	live := l.substitutePrevious(cfg)
	c := &classes{cms: map[string]map[string]string{}, rabbit: map[string]*rabbitmqBrokerConfigSpec{}}
	for _, p := range live {
		if p.cm != nil && !p.failed() {
			c.cms[p.status.Namespace+"/"+p.status.Name] = p.cm
		}
		if p.rabbit != nil && !p.failed() {
			c.rabbit[p.status.Namespace+"/"+p.status.Name] = p.rabbit
		}
	}
	r := &resolver{st: l.st, refs: l.refs, addresses: map[string]string{}, declared: map[string]bool{}, skipped: map[string]ObjectStatus{}}
	for _, p := range live {
		switch {
		case p.status.Skipped && p.status.Name != "":
			r.skipped[p.key()] = p.status
		case !p.status.Skipped && !p.duplicate && p.status.Name != "":
			r.declared[p.key()] = true
		}
		if p.cm != nil && !p.failed() && p.status.Namespace == systemNamespace && p.status.Name == cmKReferenceMapping {
			m, errs := readMapping(p.cm)
			r.mapping = m
			for _, e := range errs {
				p.fail("%s", e)
			}
		}
	}
	nodes := map[string]*node{} // by "ns/name", the address path
	claim := func(p *parsed, n *node) bool {
		k := n.Key()
		if other, ok := nodes[k]; ok {
			what := "same namespace and name as"
			if n.Owner != "" {
				what = fmt.Sprintf("its channel %s has the same namespace and name as", n.Name)
			}
			if other.Owner != "" {
				p.fail("%s a channel of %s (%s): both would be addressed at /%s", what, other.Owner, other.owner.status.File, k)
			} else {
				p.fail("%s %s (%s): both would be addressed at /%s", what, other.owner.key(), other.owner.status.File, k)
			}
			return false
		}
		nodes[k] = n
		return true
	}
	ready := func(p *parsed) bool { return !p.duplicate && !p.failed() && !p.status.Skipped }

	// Brokers and channels first: their addresses are what refs resolve to.
	for _, p := range live {
		if !ready(p) {
			continue
		}
		ns, name := p.status.Namespace, p.status.Name
		switch {
		case p.broker != nil:
			bb, errs := c.broker(p)
			for _, e := range errs {
				p.fail("%s", e)
			}
			delivery := p.broker.delivery
			if !p.broker.hasDelivery && len(errs) == 0 { // a broker that does not run needs no delivery
				ds, where, err := c.defaultDelivery(ns, p.broker)
				switch {
				case err != nil:
					p.fail("%v", err)
				case ds != nil:
					delivery = p.defaultDelivery(where, ds)
				}
			}
			if p.failed() {
				continue
			}
			n := &node{owner: p, delivery: delivery, Broker: Broker{
				Namespace: ns, Name: name, Kind: kindBroker, Channel: bb.backend, Class: bb.class,
				Settings:       bb.settings.merge(p.own),
				HeaderEncoding: p.broker.headerEnc, Labels: p.labels, MaxRate: p.maxRate,
				DedupWindow: p.dedup, Retention: p.keep,
			}}
			if claim(p, n) {
				r.addresses[p.key()] = r.address(ns, name)
				p.status.Address, p.status.Channel = r.address(ns, name), bb.backend
			}
		case p.channel != nil:
			ch := p.channel
			n := &node{owner: p, delivery: ch.delivery, Broker: Broker{
				Namespace: ns, Name: name, Kind: p.status.Kind, Channel: ch.backend,
				Settings: ch.settings, HeaderEncoding: ch.headerEnc,
				Labels: p.labels, MaxRate: p.maxRate, DedupWindow: p.dedup, Retention: p.keep,
			}}
			if p.status.Kind == kindChannel {
				t := ch.template
				if t == nil {
					var err error
					if t, err = c.channelDefault(ns); err != nil {
						p.fail("%v", err)
						continue
					}
				}
				if t != nil {
					n.tmplKind = t.kind
					if ch.backend != "" && ch.backend != t.backend {
						p.fail("metadata.annotations.%s: %q conflicts with the %s backend of the channel template", annotationChannel, ch.backend, t.backend)
						continue
					}
					n.Channel, n.Settings = t.backend, t.settings
				}
			}
			n.Settings = n.Settings.merge(p.own)
			if claim(p, n) {
				r.addresses[p.key()] = r.address(ns, name)
				p.status.Address, p.status.Channel = r.address(ns, name), n.Channel
			}
		}
	}
	// Sequences and Parallels: their channels, then their address.
	flows := map[*parsed][]*node{}
	for _, p := range live {
		if !ready(p) || (p.seq == nil && p.par == nil) {
			continue
		}
		t := (*tmpl)(nil)
		if p.seq != nil {
			t = p.seq.template
		} else {
			t = p.par.template
		}
		if t == nil {
			var err error
			if t, err = c.channelDefault(p.status.Namespace); err != nil {
				p.fail("%v", err)
				continue
			}
		}
		backend, kind := ChannelDefault, kindChannel
		var settings Settings
		if t != nil {
			backend, kind, settings = t.backend, t.kind, t.settings
		}
		settings = settings.merge(p.own)
		if a := p.annotations[annotationChannel]; a != "" {
			if backend != ChannelDefault && a != backend {
				p.fail("metadata.annotations.%s: %q conflicts with the %s backend of the channel template", annotationChannel, a, backend)
				continue
			}
			backend = a
		}
		var names []string
		if p.seq != nil {
			for i := range p.seq.steps {
				names = append(names, childName(p.status.Name, fmt.Sprintf("-kn-sequence-%d", i)))
			}
		} else {
			names = append(names, childName(p.status.Name, "-kn-parallel"))
			for i := range p.par.branches {
				names = append(names, childName(p.status.Name, fmt.Sprintf("-kn-parallel-%d", i)))
			}
		}
		var made []*node
		ok := true
		for _, name := range names {
			n := &node{owner: p, Broker: Broker{
				Namespace: p.status.Namespace, Name: name, Kind: kind, Channel: backend, Settings: settings,
				HeaderEncoding: p.annotations[annotationHeaderEncoding], Owner: p.key(),
			}}
			if n.HeaderEncoding == "minimal" {
				n.HeaderEncoding = HeaderEncodingMinimal
			}
			if !claim(p, n) {
				ok = false
				break
			}
			made = append(made, n)
		}
		if !ok {
			for _, n := range made {
				delete(nodes, n.Key())
			}
			continue
		}
		flows[p] = made
		p.status.FlowChannels = nil
		for i, n := range made {
			k := kinds[n.Kind]
			subs := []string{n.Name}
			if p.par != nil && i == 0 {
				subs = nil
				for b := range p.par.branches {
					subs = append(subs, childName(p.status.Name, fmt.Sprintf("-kn-parallel-filter-%d", b)))
				}
			}
			p.status.FlowChannels = append(p.status.FlowChannels, FlowChannel{APIVersion: k.group + "/" + k.version,
				Kind: n.Kind, Name: n.Name, Subscriptions: subs, Ready: true})
		}
		addr := r.address(p.status.Namespace, made[0].Name)
		r.addresses[p.key()] = addr
		p.status.Address, p.status.Channel = addr, backend
	}

	// Now every address is known: resolve destinations and attach subscriptions.
	// resolveDest resolves a subscriber or dead-letter sink, whose CACerts and audience
	// the caller keeps; res any other destination, where Sluice does not honour them.
	var resolveDest func(p *parsed, d *dest) string
	res := func(p *parsed, d *dest) string {
		if d != nil && (d.caCerts != "" || d.audience != "") {
			p.fail("%s: CACerts and audience: supported by Knative, not by Sluice here: Sluice honours them on spec.subscriber and deadLetterSink", d.path)
		}
		return resolveDest(p, d)
	}
	resolveDest = func(p *parsed, d *dest) string {
		if d == nil {
			return ""
		}
		out, err := r.resolve(d, p.status.Namespace)
		if err != nil {
			p.fail("%v", err)
			return ""
		}
		p.status.Refs = append(p.status.Refs, out)
		return out.URL
	}
	resDelivery := func(p *parsed, d partialDelivery) partialDelivery {
		if d.dls != nil {
			if u := resolveDest(p, d.dls); u != "" {
				d.deadLetterSink = &u
			}
		}
		return d
	}
	for _, n := range nodes {
		if n.owner.broker != nil || n.owner.channel != nil {
			n.delivery = resDelivery(n.owner, n.delivery)
		}
	}
	type pending struct {
		n *node
		t Trigger
	}
	var subs []pending
	for _, p := range live {
		if !ready(p) {
			continue
		}
		ns, name := p.status.Namespace, p.status.Name
		switch {
		case p.trigger != nil:
			t := p.trigger
			bns := t.brokerNS
			n, ok := nodes[bns+"/"+t.broker]
			switch {
			case !ok && r.declared[kindBroker+" "+bns+"/"+t.broker]:
				p.fail("%s: Broker %s/%s is not ready", t.brokerPath, bns, t.broker)
			case !ok:
				p.fail("%s: %s", t.brokerPath, r.why(kindBroker, bns, t.broker))
			case n.Kind != kindBroker:
				p.fail("%s: %s/%s is a %s, not a Broker; use a Subscription", t.brokerPath, bns, t.broker, n.Kind)
			}
			tr := Trigger{Namespace: ns, Name: name, Kind: kindTrigger, Filter: t.filter, Attributes: t.attributes,
				Filters: t.filters, Ordered: t.ordered, Batch: t.batch, BatchWait: t.batchWait, Caps: t.caps, Paused: p.paused, StartFrom: p.start, Source: p.status.File}
			tr.Subscriber = resolveDest(p, t.subscriber)
			if t.subscriber != nil {
				tr.SubscriberCACerts, tr.SubscriberAudience = t.subscriber.caCerts, t.subscriber.audience
			}
			d := resDelivery(p, t.delivery)
			if p.failed() {
				continue
			}
			tr.Delivery = d.over(n.delivery).resolve()
			subs = append(subs, pending{n, tr})
		case p.sub != nil:
			s := p.sub
			n, ok := nodes[ns+"/"+s.channel.Name]
			switch {
			case !ok && r.declared[s.channel.Kind+" "+ns+"/"+s.channel.Name]:
				p.fail("spec.channel: %s %s/%s is not ready", s.channel.Kind, ns, s.channel.Name)
			case !ok:
				p.fail("spec.channel: %s", r.why(s.channel.Kind, ns, s.channel.Name))
			}
			if !ok {
				continue
			}
			group, _ := splitAPIVersion(s.channel.APIVersion)
			switch {
			case addressable[s.channel.Kind] != groupMessaging || group != groupMessaging:
				p.fail("spec.channel: %s %q is not a channel kind (%s Channel, InMemoryChannel, KafkaChannel, NatsJetStreamChannel)", s.channel.APIVersion, s.channel.Kind, groupMessaging)
			case n.Kind == kindBroker:
				p.fail("spec.channel: %s/%s is a Broker, not a channel; use a Trigger", ns, s.channel.Name)
			case n.Kind != s.channel.Kind && !(n.Kind == kindChannel && n.tmplKind == s.channel.Kind):
				p.fail("spec.channel: %s/%s is a %s, not a %s", ns, s.channel.Name, n.Kind, s.channel.Kind)
			}
			tr := Trigger{Namespace: ns, Name: name, Kind: kindSubscription, Filter: filter.MatchAll, Paused: p.paused, StartFrom: p.start, Source: p.status.File}
			tr.Subscriber = resolveDest(p, s.subscriber)
			if s.subscriber != nil {
				tr.SubscriberCACerts, tr.SubscriberAudience = s.subscriber.caCerts, s.subscriber.audience
			}
			tr.Reply = res(p, s.reply)
			if tr.Subscriber == "" { // only a reply: events are forwarded to it unchanged
				tr.Subscriber, tr.Reply = tr.Reply, ""
			}
			d := resDelivery(p, s.delivery)
			if p.failed() {
				continue
			}
			tr.Delivery = d.over(n.delivery).resolve()
			subs = append(subs, pending{n, tr})
		case p.seq != nil && flows[p] != nil:
			chs := flows[p]
			reply := res(p, p.seq.reply)
			var made []pending
			for i, st := range p.seq.steps {
				tr := Trigger{Namespace: ns, Name: chs[i].Name, Kind: kindSubscription, Filter: filter.MatchAll, Source: p.status.File}
				tr.Subscriber = res(p, st.to)
				tr.Reply = reply
				if i+1 < len(chs) {
					tr.Reply = r.address(ns, chs[i+1].Name)
				}
				tr.Delivery = resDelivery(p, st.delivery).resolve()
				made = append(made, pending{chs[i], tr})
			}
			if !p.failed() {
				subs = append(subs, made...)
			}
		case p.par != nil && flows[p] != nil:
			chs := flows[p]
			reply := res(p, p.par.reply)
			var made []pending
			for i, br := range p.par.branches {
				branch := chs[i+1]
				f := Trigger{Namespace: ns, Name: childName(name, fmt.Sprintf("-kn-parallel-filter-%d", i)), Kind: kindSubscription,
					Filter: filter.MatchAll, Source: p.status.File}
				if br.filter != nil {
					f.Subscriber = res(p, br.filter)
					f.Reply = r.address(ns, branch.Name)
				} else {
					f.Subscriber = r.address(ns, branch.Name)
				}
				d := resDelivery(p, br.delivery).resolve()
				f.Delivery = d
				s := Trigger{Namespace: ns, Name: branch.Name, Kind: kindSubscription, Filter: filter.MatchAll, Source: p.status.File,
					Subscriber: res(p, br.subscriber), Reply: reply, Delivery: d}
				if br.reply != nil {
					s.Reply = res(p, br.reply)
				}
				made = append(made, pending{chs[0], f}, pending{branch, s})
			}
			if !p.failed() {
				subs = append(subs, made...)
			}
		case p.policy != nil:
			if !p.failed() {
				cfg.EventPolicies = append(cfg.EventPolicies, p.policy.EventPolicy)
			}
		case p.ping != nil:
			sink := res(p, p.ping.sink)
			if p.failed() {
				continue
			}
			cfg.PingSources = append(cfg.PingSources, PingSource{Namespace: ns, Name: name, Schedule: p.ping.schedule,
				ContentType: p.ping.contentType, Data: p.ping.data, Extensions: p.ping.extensions, Sink: sink, Source: p.status.File})
		}
	}
	// A broker or channel that failed late (a dead-letter sink that did not resolve) is
	// not run, and neither are its subscriptions.
	for k, n := range nodes {
		if n.owner.failed() {
			delete(nodes, k)
		}
	}
	for _, s := range subs {
		if n, ok := nodes[s.n.Key()]; ok && n == s.n {
			n.Triggers = append(n.Triggers, s.t)
		}
	}
	for _, n := range nodes {
		sort.Slice(n.Triggers, func(i, j int) bool { return n.Triggers[i].Key() < n.Triggers[j].Key() })
		cfg.Brokers = append(cfg.Brokers, n.Broker)
	}
	sort.Slice(cfg.Brokers, func(i, j int) bool { return cfg.Brokers[i].Key() < cfg.Brokers[j].Key() })
	sort.Slice(cfg.PingSources, func(i, j int) bool { return cfg.PingSources[i].Key() < cfg.PingSources[j].Key() })
	sort.Slice(cfg.EventPolicies, func(i, j int) bool { return cfg.EventPolicies[i].Key() < cfg.EventPolicies[j].Key() })
	for _, p := range l.objects {
		st := p.status
		switch {
		case st.Skipped:
		case p.previous:
			st.Ready = false
			if p.failed() {
				st.Reason += "; and its last good version: " + strings.Join(p.reasons, "; ")
			}
		case p.failed():
			st.Ready, st.Reason, st.reasons = false, strings.Join(p.reasons, "; "), p.reasons
			st.Address, st.Channel = "", ""
		default:
			st.Ready = true
		}
		if p.failed() {
			st.FlowChannels = nil // a flow that failed runs no channel, not even its last good version's
		}
		if !st.Ready {
			st.Address, st.Channel = "", ""
			if invalidPolicy[policyAt(st)] {
				st.Reason += "; while it is invalid, this version lets no one in to what it names (every broker and channel of its namespace when spec.to is at fault)"
			}
		}
		cfg.Objects = append(cfg.Objects, st)
	}
}

// substitutePrevious puts, in place of each object that is invalid now but was valid in
// the previous configuration, its previous version, and records the valid versions of
// this load for the next. It returns the objects to resolve.
func (l *loader) substitutePrevious(cfg *Config) []*parsed {
	var prev map[string]*parsed
	if l.st.previous != nil {
		prev = l.st.previous.good
	}
	live := make([]*parsed, 0, len(l.objects))
	// A document that could not be parsed at all names no object: every object its file
	// held last time that is missing now keeps its last good version. So does every
	// object of a file that is empty now: an editor that writes a file in place empties
	// it first, and a file being written is not an intent to remove its objects.
	broken := map[string]string{} // file → why
	for _, p := range l.objects {
		if p.failed() && p.status.Name == "" {
			broken[p.status.File] = fmt.Sprintf("its file is invalid (document %d: %s); the last good version runs", p.status.Document, strings.Join(p.reasons, "; "))
		}
	}
	for _, f := range l.empty {
		broken[f] = "its file is empty, taken for a write in progress; the last good version runs until the file holds objects again (to remove them, delete the file or leave only a comment in it)"
	}
	if len(broken) > 0 {
		for _, key := range sortedKeys(prev) {
			g := prev[key]
			why, ok := broken[g.status.File]
			if _, present := l.seen[key]; !ok || present {
				continue
			}
			q := *g
			q.status.Refs = nil
			q.status.Reason = why
			q.reasons, q.previous = nil, true
			l.objects = append(l.objects, &q)
		}
	}
	for i, p := range l.objects {
		if p.status.Skipped || p.duplicate {
			live = append(live, p)
			continue
		}
		if p.failed() && p.status.Name != "" {
			if g, ok := prev[p.key()]; ok {
				q := *g
				q.status = p.status
				q.status.Reason = "this version is invalid and was not applied (" + strings.Join(p.reasons, "; ") + "); the last good version runs"
				q.reasons, q.previous = nil, true
				q.status.Refs = nil
				l.objects[i] = &q
				p = &q
			}
		}
		if !p.failed() && p.status.Name != "" {
			c := *p
			c.status.Refs = nil
			cfg.good[p.key()] = &c
		}
		live = append(live, p)
	}
	return live
}

// policyAt names an object by where it was read, for the notes on invalid EventPolicies.
func policyAt(st ObjectStatus) string {
	return st.File + "\x00" + itoa(st.Document) + "\x00" + st.Name
}

// childName names a channel or subscription of a Sequence or Parallel the way Knative
// does: parent + suffix, shortened with a hash of the whole when longer than 63
// characters.
func childName(parent, suffix string) string {
	n := parent + suffix
	if len(n) <= 63 {
		return n
	}
	sum := md5.Sum([]byte(n))
	h := hex.EncodeToString(sum[:])
	return strings.TrimRight(n[:63-len(h)], "-") + h
}
