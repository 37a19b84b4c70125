package broker

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNoBackend keeps the broker blind to channel backends: its code imports the
// channel interfaces, never a backend package (channel/registry chooses and opens them).
func TestImportsNoBackend(t *testing.T) {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		name := f.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/sluice-broker/sluice/channel/") {
				t.Errorf("%s imports %s: the broker must see backends only through the channel interfaces", name, path)
			}
		}
	}
}
