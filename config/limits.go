package config

import (
	"bytes"
	"fmt"
	"io"
	"os"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// Bounds on what a configuration may make Sluice spend. docs/config.md ("Limits") and
// docs/limits.md name them.
const (
	// MaxConfigBytes bounds the files of one configuration together: the file, or every
	// file of the directory, read at once. The refs file has a bound of its own, the same.
	MaxConfigBytes = 32 << 20
	// MaxExpandedBytes bounds what the documents of one configuration expand to, together,
	// once every YAML alias is replaced by what it names (each use of an alias counts the
	// whole of its anchor's value): a small file of aliases to one large value would
	// otherwise expand to gigabytes.
	MaxExpandedBytes = 64 << 20
	// MaxEmbeddedYAMLBytes bounds the expanded size of a YAML text held in a ConfigMap
	// value that Sluice reads (default-br-config, default-ch-config, channel-template-spec).
	MaxEmbeddedYAMLBytes = 1 << 20
	// MaxRefURLBytes bounds the URL a ref URL template (--ref-url-template, an entry of
	// config-kreference-mapping) renders.
	MaxRefURLBytes = 8 << 10
)

// mib names a byte count in MiB for messages.
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// readBounded reads the file name, which may hold at most limit bytes: what is left of
// MaxConfigBytes. The error names the file and the limit (what says what is too large).
func readBounded(name string, limit int64, what string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooBig := func() error {
		return fmt.Errorf("%s: %s larger than %s (config.MaxConfigBytes)", name, what, mib(MaxConfigBytes))
	}
	var size int64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		if size = fi.Size(); size > limit {
			return nil, tooBig() // refused before anything is read
		}
	}
	// The file may grow between Stat and the read: read one byte more than allowed, into
	// a buffer of the size Stat gave (with room for bytes.Buffer's minimum read).
	b := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	if _, err := b.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, err
	}
	if int64(b.Len()) > limit {
		return nil, tooBig()
	}
	return b.Bytes(), nil
}

// expandedSize returns the size of the YAML document doc once its aliases are expanded,
// counting at most up to limit: a result above limit means "more than limit", and the
// count stops there. A document without aliases counts its length. A document that does
// not parse counts its length too: it expands to nothing, and its parse error is
// reported where it is converted.
func expandedSize(doc []byte, limit int64) int64 {
	if bytes.IndexByte(doc, '*') < 0 {
		return int64(len(doc)) // no alias can be in it
	}
	// go.yaml.in/yaml/v2 is the parser sigs.k8s.io/yaml uses: an alias decodes to a copy
	// of the anchor's nodes, its strings shared, and v2 refuses a document whose alias
	// decodes outnumber its other nodes too far ("excessive aliasing"), so the tree
	// measured here is small even when what it stands for is not.
	var v any
	if err := yamlv2.Unmarshal(doc, &v); err != nil {
		return int64(len(doc))
	}
	return measure(v, limit)
}

// measure adds up the bytes v stands for, about its JSON size, stopping once over limit.
func measure(v any, limit int64) int64 {
	var n int64
	var walk func(v any)
	walk = func(v any) {
		if n > limit {
			return
		}
		switch x := v.(type) {
		case string:
			n += int64(len(x)) + 3
		case []any:
			n += 2
			for _, e := range x {
				walk(e)
				n++
			}
		case map[any]any:
			n += 2
			for k, e := range x {
				walk(k)
				walk(e)
				n += 2
			}
		default:
			n += 8
		}
	}
	walk(v)
	return n
}

// unmarshalEmbedded decodes the YAML text of a ConfigMap value strictly into v, unless
// it expands beyond MaxEmbeddedYAMLBytes (Kubernetes bounds a whole ConfigMap to 1 MiB).
func unmarshalEmbedded(text string, v any) error {
	if n := expandedSize([]byte(text), MaxEmbeddedYAMLBytes); n > MaxEmbeddedYAMLBytes {
		return fmt.Errorf("expands to more than %s with its YAML aliases (config.MaxEmbeddedYAMLBytes)", mib(MaxEmbeddedYAMLBytes))
	}
	return yaml.UnmarshalStrict([]byte(text), v)
}
