package event

import (
	"net/textproto"
	"sync"
	"sync/atomic"
)

// headerKeys caches the canonical ce- header key of extension names and the extension
// name of canonical header keys, so that the hot paths (parsing ingress requests,
// writing deliveries) do not build them per event. Lookups read an immutable map
// without a lock: one hash and one probe, where a sync.Map walks a trie of nodes that
// are cold in the cache between events. A new name is added by copying the map, so the
// cache holds at most maxCachedKeys names: a client sending random extension names
// cannot grow it without bound, or make it copy more than that many times; past that,
// keys are built per call.
type headerKeys struct {
	m  atomic.Pointer[keyMaps]
	mu sync.Mutex // serialises additions
}

// keyMaps is one immutable generation of the cache.
type keyMaps struct {
	toKey  map[string]string // extension name → "Ce-Name"
	toName map[string]string // "Ce-Name" → extension name
}

// maxCachedKeys bounds the cache: with copies of at most this many names, a client
// sending ever new names costs at most about maxCachedKeys²/2 map insertions over the
// process's life (tens of milliseconds), then the allocations it always cost.
const maxCachedKeys = 512

var keys headerKeys

// key returns the canonical header key of extension name.
func (c *headerKeys) key(name string) string {
	if m := c.m.Load(); m != nil {
		if k, ok := m.toKey[name]; ok {
			return k
		}
	}
	k := textproto.CanonicalMIMEHeaderKey("ce-" + name)
	c.remember(name, k)
	return k
}

// name returns the extension name of canonical header key k ("Ce-Name" → "name").
func (c *headerKeys) name(k string) string {
	if m := c.m.Load(); m != nil {
		if n, ok := m.toName[k]; ok {
			return n
		}
	}
	n := toLowerASCII(k[3:])
	c.remember(n, k)
	return n
}

func (c *headerKeys) remember(name, k string) {
	if !ValidExtensionName(name) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old == nil {
		old = &keyMaps{}
	}
	if _, ok := old.toKey[name]; ok || len(old.toKey) >= maxCachedKeys {
		return
	}
	next := &keyMaps{toKey: make(map[string]string, len(old.toKey)+1), toName: make(map[string]string, len(old.toName)+1)}
	for n, key := range old.toKey {
		next.toKey[n], next.toName[key] = key, n
	}
	next.toKey[name], next.toName[k] = k, name
	c.m.Store(next)
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
