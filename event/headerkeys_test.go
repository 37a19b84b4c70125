package event

import (
	"fmt"
	"testing"
)

func TestHeaderKeys(t *testing.T) {
	var c headerKeys
	for _, tt := range []struct{ name, key string }{
		{"sluicerun", "Ce-Sluicerun"},
		{"knativearrivaltime", "Ce-Knativearrivaltime"},
		{"x1", "Ce-X1"},
	} {
		for round := range 2 { // built, then cached
			if got := c.key(tt.name); got != tt.key {
				t.Errorf("round %d: key(%q) = %q, want %q", round, tt.name, got, tt.key)
			}
			if got := c.name(tt.key); got != tt.name {
				t.Errorf("round %d: name(%q) = %q, want %q", round, tt.key, got, tt.name)
			}
		}
	}
	if n := len(c.m.Load().toKey); n != 3 {
		t.Errorf("%d names cached, want 3", n)
	}
	// A name that is not a valid extension name is answered but not cached.
	if got := c.name("Ce-Bad_name"); got != "bad_name" {
		t.Errorf("name(Ce-Bad_name) = %q", got)
	}
	if _, ok := c.m.Load().toName["Ce-Bad_name"]; ok {
		t.Error("an invalid extension name was cached")
	}
}

func TestHeaderKeysBounded(t *testing.T) {
	var c headerKeys
	for i := range maxCachedKeys + 100 {
		c.key(fmt.Sprintf("ext%d", i))
	}
	m := c.m.Load()
	if len(m.toKey) != maxCachedKeys || len(m.toName) != maxCachedKeys {
		t.Fatalf("cached %d names and %d keys, want %d each", len(m.toKey), len(m.toName), maxCachedKeys)
	}
	// Past the bound, keys are still right, built per call.
	last := fmt.Sprintf("ext%d", maxCachedKeys+99)
	if got := c.key(last); got != "Ce-"+"Ext"+fmt.Sprint(maxCachedKeys+99) {
		t.Errorf("key(%q) = %q past the bound", last, got)
	}
	if got := c.name("Ce-Ext9999"); got != "ext9999" {
		t.Errorf("name past the bound = %q", got)
	}
}
