package event

import (
	"net/textproto"
	"sync"
	"sync/atomic"
)

// headerKeys caches the canonical ce- header key of extension names and the extension
// name of canonical header keys, so that the hot paths (parsing ingress requests,
// writing deliveries) do not build them per event. The cache holds at most
// maxCachedKeys names, so a client sending random extension names cannot grow it
// without bound; past that, keys are built per call.
type headerKeys struct {
	toKey  sync.Map // extension name → "Ce-Name"
	toName sync.Map // "Ce-Name" → extension name
	n      atomic.Int32
}

const maxCachedKeys = 4096

var keys headerKeys

// key returns the canonical header key of extension name.
func (c *headerKeys) key(name string) string {
	if k, ok := c.toKey.Load(name); ok {
		return k.(string)
	}
	k := textproto.CanonicalMIMEHeaderKey("ce-" + name)
	c.remember(name, k)
	return k
}

// name returns the extension name of canonical header key k ("Ce-Name" → "name").
func (c *headerKeys) name(k string) string {
	if n, ok := c.toName.Load(k); ok {
		return n.(string)
	}
	n := toLowerASCII(k[3:])
	c.remember(n, k)
	return n
}

func (c *headerKeys) remember(name, k string) {
	if c.n.Load() >= maxCachedKeys || !ValidExtensionName(name) {
		return
	}
	c.n.Add(1)
	c.toKey.Store(name, k)
	c.toName.Store(k, name)
}

func toLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
