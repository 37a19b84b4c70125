package kafka

import (
	"bytes"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-broker/sluice/channel"
	"github.com/sluice-broker/sluice/event"
)

// Records hold events in the CloudEvents Kafka protocol binding's binary mode, as
// Knative's Kafka channel and broker write them: each attribute and extension is a
// header "ce_<name>", datacontenttype is the "content-type" header, the data is the
// value, and the partitionkey extension is also the record key. Sluice adds one
// "sluice-sub" header per subscription the event was routed to.
const (
	headerPrefix      = "ce_"
	headerContentType = "content-type"
	headerSub         = "sluice-sub"
	// extPartitionKey is the CloudEvents partitioning extension.
	extPartitionKey = "partitionkey"
)

// fillRecord sets r's key, value and headers to hold env.
func fillRecord(r *kgo.Record, topic string, env *channel.Envelope) {
	e := env.Event
	n := len(e.Extensions) + len(env.Subscriptions) + 8
	h := make([]kgo.RecordHeader, 0, n)
	add := func(k, v string) {
		if v != "" {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(headerPrefix+event.AttrSpecVersion, e.SpecVersion)
	add(headerPrefix+event.AttrID, e.ID)
	add(headerPrefix+event.AttrSource, e.Source)
	add(headerPrefix+event.AttrType, e.Type)
	add(headerContentType, e.DataContentType)
	add(headerPrefix+event.AttrDataSchema, e.DataSchema)
	add(headerPrefix+event.AttrSubject, e.Subject)
	add(headerPrefix+event.AttrTime, e.Time)
	for _, x := range e.Extensions {
		h = append(h, kgo.RecordHeader{Key: headerPrefix + x.Name, Value: []byte(x.Value)})
		if x.Name == extPartitionKey {
			r.Key = []byte(x.Value)
		}
	}
	for _, s := range env.Subscriptions {
		h = append(h, kgo.RecordHeader{Key: headerSub, Value: []byte(s)})
	}
	r.Topic = topic
	r.Headers = h
	r.Value = e.Data
}

// decodeRecord returns the event r holds. Its data aliases r.Value.
func decodeRecord(r *kgo.Record) *event.Event {
	e := &event.Event{}
	for _, h := range r.Headers {
		switch {
		case h.Key == headerContentType:
			e.DataContentType = string(h.Value)
		case strings.HasPrefix(h.Key, headerPrefix):
			e.Set(h.Key[len(headerPrefix):], string(h.Value))
		}
	}
	if len(r.Value) > 0 {
		// A copy: r.Value points into its whole decompressed batch, which would stay
		// in memory until every record of it is settled.
		e.Data = bytes.Clone(r.Value)
	}
	return e
}

// routedTo reports whether r was routed to sub, without decoding the event.
func routedTo(r *kgo.Record, sub string) bool {
	for _, h := range r.Headers {
		if h.Key == headerSub && string(h.Value) == sub {
			return true
		}
	}
	return false
}
