package event

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The binary codec stores an event compactly for durable channels:
//
//	version byte (1)
//	uvarint count of attributes, then per attribute: uvarint len, name, uvarint len, value
//	the rest: data
//
// Attributes are every set context attribute and every extension, names as the spec
// spells them.
const codecVersion = 1

// AppendBinary appends the binary encoding of e to dst.
func AppendBinary(dst []byte, e *Event) []byte {
	attrs := e.contextAttrs()
	n := len(e.Extensions)
	for _, a := range attrs {
		if a.value != "" {
			n++
		}
	}
	dst = append(dst, codecVersion)
	dst = binary.AppendUvarint(dst, uint64(n))
	put := func(k, v string) {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		dst = append(dst, v...)
	}
	for _, a := range attrs {
		if a.value != "" {
			put(a.name, a.value)
		}
	}
	for _, x := range e.Extensions {
		put(x.Name, x.Value)
	}
	return append(dst, e.Data...)
}

var errCodec = errors.New("corrupt encoded event")

// DecodeBinary decodes an event written by AppendBinary. The event's data aliases b.
func DecodeBinary(b []byte) (*Event, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return nil, fmt.Errorf("%w: unknown version", errCodec)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: attribute count", errCodec)
	}
	b = b[k:]
	str := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	e := &Event{}
	for i := uint64(0); i < n; i++ {
		name, ok1 := str()
		val, ok2 := str()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: attribute %d", errCodec, i)
		}
		if isContextAttr(name) {
			e.Set(name, val)
			continue
		}
		e.Extensions = append(e.Extensions, Extension{Name: name, Value: val})
	}
	// One pass, not a search per attribute: an event stored before the attribute limit
	// may have many.
	if i := firstDuplicate(len(e.Extensions), func(i int) string { return e.Extensions[i].Name }); i >= 0 {
		return nil, fmt.Errorf("%w: %s twice", errCodec, e.Extensions[i].Name)
	}
	if len(b) > 0 {
		e.Data = b
	}
	return e, nil
}

// isContextAttr reports whether name is one of the context attributes the specification
// defines, which Event holds in fields of their own.
func isContextAttr(name string) bool {
	switch name {
	case AttrSpecVersion, AttrID, AttrSource, AttrType, AttrDataContentType, AttrDataSchema, AttrSubject, AttrTime:
		return true
	}
	return false
}
