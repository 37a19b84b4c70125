package httpserver

import (
	"bytes"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
)

// Canonical header names without an allocation per request. A request's header map is
// keyed by canonical names ("Ce-Id" for "ce-id"); computing one costs two allocations
// (the name as a string, then its canonical copy), with every header of every request.
// canonNames maps the spellings seen to their canonical form: the common names from the
// start, and the first maxLearnedNames others the lean path meets, each at most
// maxLearnedName bytes long, so that a client sending ever new names costs at most
// maxLearnedNames × 2 × maxLearnedName bytes (64 KiB) and, past that, the allocations
// it always cost.

const (
	maxLearnedNames = 512
	maxLearnedName  = 64
)

// canonNames is a server's table of header-name spellings. Lookups read an immutable
// map without a lock; a new spelling is added by copying it (at most maxLearnedNames
// times in the server's life).
type canonNames struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex // serialises additions
	n  int        // spellings learned
}

// newCanonNames returns a table holding the common names, spelled as clients do: as is,
// all lower case and all upper case.
func newCanonNames() *canonNames {
	names := []string{
		"Accept", "Accept-Encoding", "Authorization", "Connection", "Content-Length",
		"Content-Type", "User-Agent", "Traceparent", "Tracestate", "Baggage",
		"Ce-Id", "Ce-Source", "Ce-Specversion", "Ce-Type", "Ce-Time", "Ce-Subject",
		"Ce-Dataschema", "Ce-Partitionkey", "Ce-Knativearrivaltime", "X-Request-Id",
	}
	m := make(map[string]string, 3*len(names))
	for _, n := range names {
		m[n] = n
		m[string(bytes.ToLower([]byte(n)))] = n
		m[string(bytes.ToUpper([]byte(n)))] = n
	}
	c := &canonNames{}
	c.m.Store(&m)
	return c
}

// key returns the canonical form of the header name (a token: parseLeanHead checked).
func (c *canonNames) key(name []byte) string {
	if k, ok := (*c.m.Load())[string(name)]; ok { // looked up without a conversion
		return k
	}
	k := http.CanonicalHeaderKey(string(name))
	if len(name) <= maxLearnedName {
		c.learn(string(name), k)
	}
	return k
}

// learn adds the spelling name of key, unless the table is full or has it already.
func (c *canonNames) learn(name, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.m.Load()
	if _, ok := old[name]; ok || c.n >= maxLearnedNames {
		return
	}
	m := make(map[string]string, len(old)+1)
	maps.Copy(m, old)
	m[name] = key
	c.m.Store(&m)
	c.n++
}
