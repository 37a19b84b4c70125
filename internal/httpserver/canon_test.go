package httpserver

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestCanonNames(t *testing.T) {
	c := newCanonNames()
	long := "x-" + strings.Repeat("a", maxLearnedName)
	for _, name := range []string{"ce-id", "CE-ID", "Ce-Id", "ce-sluiceseq", "ce-sluiceseq", "X-ODD-name", long} {
		if got, want := c.key([]byte(name)), http.CanonicalHeaderKey(name); got != want {
			t.Errorf("key(%q) = %q, want %q", name, got, want)
		}
	}
	if _, ok := (*c.m.Load())[long]; ok {
		t.Errorf("a name of %d bytes was learned; the bound is %d", len(long), maxLearnedName)
	}
	learned := []byte("ce-sluiceseq")
	if n := testing.AllocsPerRun(100, func() { c.key(learned) }); n != 0 {
		t.Errorf("a learned spelling costs %v allocations, want 0", n)
	}
	for i := range 2 * maxLearnedNames {
		c.key(fmt.Appendf(nil, "x-flood-%d", i))
	}
	if c.n != maxLearnedNames {
		t.Errorf("learned %d spellings, want the bound %d", c.n, maxLearnedNames)
	}
	if got := c.key([]byte("x-late-name")); got != "X-Late-Name" {
		t.Errorf("past the bound: key = %q, want X-Late-Name", got)
	}
}
