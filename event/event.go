// Package event holds Sluice's in-memory CloudEvent and its HTTP binding: parsing binary,
// structured and batch requests with strict CloudEvents 1.0 validation, writing events in
// binary mode, and a compact binary codec for durable channels.
//
// Sluice keeps attribute values as strings in their canonical string form and the data as
// the exact bytes received, so an event reaches subscribers unchanged. It parses HTTP
// itself rather than through cloudevents/sdk-go's binding: the sdk does not percent-decode
// ce- header values, lower-cases invalid extension names instead of rejecting them, and
// accepts specversion 0.3. Parsing here is also cheaper: fewer allocations and less
// time per request (BenchmarkReadRequest against BenchmarkReadRequestSDK in this
// package; docs/benchmarks/hot-path.md).
package event

import (
	"strings"
)

// SpecVersion is the only CloudEvents specversion Sluice accepts.
const SpecVersion = "1.0"

// Names of the context attributes defined by the CloudEvents 1.0 specification.
const (
	AttrSpecVersion     = "specversion"
	AttrID              = "id"
	AttrSource          = "source"
	AttrType            = "type"
	AttrDataContentType = "datacontenttype"
	AttrDataSchema      = "dataschema"
	AttrSubject         = "subject"
	AttrTime            = "time"
)

// Extension is one extension context attribute in its canonical string form.
type Extension struct {
	Name  string
	Value string
}

// Event is one CloudEvent. Optional attributes are empty when absent. Extensions keep the
// order they were received in; names are unique. An Event is not safe for concurrent
// mutation; once published to a channel it is shared read-only, so change a Clone.
type Event struct {
	SpecVersion     string
	ID              string
	Source          string
	Type            string
	DataContentType string
	DataSchema      string
	Subject         string
	Time            string
	Extensions      []Extension
	Data            []byte
}

// contextAttr is one context attribute of an event: its name, the canonical HTTP header
// that carries it in binary mode, and its value ("" when absent).
type contextAttr struct {
	name, header, value string
}

// contextAttrs lists e's context attributes in the specification's order. Writers of the
// binary-mode headers, the JSON format and the storage codec all walk this one list.
func (e *Event) contextAttrs() [8]contextAttr {
	return [8]contextAttr{
		{AttrSpecVersion, hdrSpecVersion, e.SpecVersion},
		{AttrID, hdrID, e.ID},
		{AttrSource, hdrSource, e.Source},
		{AttrType, hdrType, e.Type},
		{AttrDataContentType, "Content-Type", e.DataContentType},
		{AttrDataSchema, hdrDataSchema, e.DataSchema},
		{AttrSubject, hdrSubject, e.Subject},
		{AttrTime, hdrTime, e.Time},
	}
}

// Get returns the value of the attribute or extension called name, and whether it is set.
func (e *Event) Get(name string) (string, bool) {
	var v string
	switch name {
	case AttrSpecVersion:
		v = e.SpecVersion
	case AttrID:
		v = e.ID
	case AttrSource:
		v = e.Source
	case AttrType:
		v = e.Type
	case AttrDataContentType:
		v = e.DataContentType
	case AttrDataSchema:
		v = e.DataSchema
	case AttrSubject:
		v = e.Subject
	case AttrTime:
		v = e.Time
	default:
		for i := range e.Extensions {
			if e.Extensions[i].Name == name {
				return e.Extensions[i].Value, true
			}
		}
		return "", false
	}
	return v, v != ""
}

// Set sets the attribute or extension called name. It does not validate the name; use
// ValidExtensionName first for names that come from outside.
func (e *Event) Set(name, value string) {
	switch name {
	case AttrSpecVersion:
		e.SpecVersion = value
	case AttrID:
		e.ID = value
	case AttrSource:
		e.Source = value
	case AttrType:
		e.Type = value
	case AttrDataContentType:
		e.DataContentType = value
	case AttrDataSchema:
		e.DataSchema = value
	case AttrSubject:
		e.Subject = value
	case AttrTime:
		e.Time = value
	default:
		for i := range e.Extensions {
			if e.Extensions[i].Name == name {
				e.Extensions[i].Value = value
				return
			}
		}
		e.Extensions = append(e.Extensions, Extension{Name: name, Value: value})
	}
}

// Delete removes the extension called name, if present. Context attributes cannot be
// deleted this way.
func (e *Event) Delete(name string) {
	for i := range e.Extensions {
		if e.Extensions[i].Name == name {
			e.Extensions = append(e.Extensions[:i:i], e.Extensions[i+1:]...)
			return
		}
	}
}

// Clone returns a copy of e that shares Data (which is never modified in place) but not
// the extension slice, so the copy's attributes can be changed.
func (e *Event) Clone() *Event {
	c := *e
	c.Extensions = append([]Extension(nil), e.Extensions...)
	return &c
}

// eventOverhead approximates the bytes an Event costs beyond its strings and data
// (struct, slice headers, queue entry), so that memory accounting bounds the count of
// tiny events too.
const eventOverhead = 256

// Size approximates the memory e holds, for channel accounting.
func (e *Event) Size() int {
	n := eventOverhead + len(e.SpecVersion) + len(e.ID) + len(e.Source) + len(e.Type) +
		len(e.DataContentType) + len(e.DataSchema) + len(e.Subject) + len(e.Time) + len(e.Data)
	for _, x := range e.Extensions {
		n += 32 + len(x.Name) + len(x.Value)
	}
	return n
}

// String is a short description for logs: id, type and source.
func (e *Event) String() string {
	var b strings.Builder
	b.WriteString("id=")
	b.WriteString(e.ID)
	b.WriteString(" type=")
	b.WriteString(e.Type)
	b.WriteString(" source=")
	b.WriteString(e.Source)
	return b.String()
}
