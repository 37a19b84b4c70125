package event

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-broker/sluice/internal/httpascii"
)

// ValidationError says why an event is not a valid CloudEvent 1.0.
type ValidationError struct {
	Attribute string // the attribute at fault, empty when not about one attribute
	Reason    string
}

func (e *ValidationError) Error() string {
	if e.Attribute == "" {
		return "invalid event: " + e.Reason
	}
	return "invalid event: " + e.Attribute + ": " + e.Reason
}

func invalid(attr, format string, args ...any) *ValidationError {
	return &ValidationError{Attribute: attr, Reason: fmt.Sprintf(format, args...)}
}

// ValidExtensionName reports whether name is a valid CloudEvents attribute name: one or
// more lower-case ASCII letters or digits.
func ValidExtensionName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// reservedName reports names that cannot be extensions: the spec's attributes and the
// structured-mode members for data.
func reservedName(name string) bool {
	return isContextAttr(name) || name == "data" || name == "data_base64"
}

// MaxAttributes bounds the attributes of an event read from outside: its context
// attributes and extensions together. CloudEvents and Knative set no such limit; Sluice
// sets one so that the work a request costs is bounded by a number a sender cannot
// raise. Every parser of HTTP messages (Parse, ParseStructured, ParseBatch,
// ReadRequest, ReadResponse) refuses an event with more, stopping at the first attribute
// over the limit. Validate does not check it: the extensions Sluice adds itself
// (knativebrokerttl, knativearrivaltime) may take an event past it.
const MaxAttributes = 400

// tooManyAttributes is the refusal of an event over MaxAttributes.
func tooManyAttributes() *ValidationError {
	return &ValidationError{Reason: fmt.Sprintf(
		"more than %d attributes (Sluice accepts at most %d per event, context attributes and extensions together)",
		MaxAttributes, MaxAttributes)}
}

// Validate checks e against CloudEvents 1.0: every value valid UTF-8; specversion 1.0;
// id, source and type set; source a URI-reference; dataschema an absolute URI; time RFC
// 3339; extension names [a-z0-9]+ and unique; datacontenttype, which binary mode sends as
// Content-Type without encoding, free of control characters but tab. Its work is linear
// in the number of extensions.
func (e *Event) Validate() error {
	for _, a := range e.contextAttrs() {
		if !utf8.ValidString(a.value) {
			return invalid(a.name, "not valid UTF-8")
		}
	}
	if e.SpecVersion != SpecVersion {
		if e.SpecVersion == "" {
			return invalid(AttrSpecVersion, "missing")
		}
		return invalid(AttrSpecVersion, "%q is not supported, only %s", e.SpecVersion, SpecVersion)
	}
	if e.ID == "" {
		return invalid(AttrID, "missing")
	}
	if e.Source == "" {
		return invalid(AttrSource, "missing")
	}
	if !plainReference(e.Source) {
		if _, err := url.Parse(e.Source); err != nil {
			return invalid(AttrSource, "not a URI-reference: %v", unwrapURL(err))
		}
	}
	if e.Type == "" {
		return invalid(AttrType, "missing")
	}
	if e.DataSchema != "" {
		u, err := url.Parse(e.DataSchema)
		if err != nil || !u.IsAbs() {
			return invalid(AttrDataSchema, "not an absolute URI")
		}
	}
	if e.Time != "" {
		if _, err := time.Parse(time.RFC3339Nano, e.Time); err != nil {
			return invalid(AttrTime, "%q is not an RFC 3339 timestamp", e.Time)
		}
	}
	if !httpascii.ValidValue(e.DataContentType) {
		return invalid(AttrDataContentType, "holds a control character; it travels as the Content-Type header, which cannot carry one")
	}
	for _, x := range e.Extensions {
		if !ValidExtensionName(x.Name) {
			return invalid(x.Name, "extension names must be lower-case letters and digits only")
		}
		if reservedName(x.Name) {
			return invalid(x.Name, "reserved name used as an extension")
		}
		if !utf8.ValidString(x.Value) {
			return invalid(x.Name, "not valid UTF-8")
		}
	}
	if i := firstDuplicate(len(e.Extensions), func(i int) string { return e.Extensions[i].Name }); i >= 0 {
		return invalid(e.Extensions[i].Name, "set more than once")
	}
	return nil
}

// pairwiseMax is the most names firstDuplicate compares pairwise (at most 28
// comparisons, no allocation); more go through a set.
const pairwiseMax = 8

// firstDuplicate returns the index of the first of n names (name(i) is the i-th) that
// repeats an earlier one, or -1. Its work is linear in n: it calls name at most
// max(n, pairwiseMax²) times.
func firstDuplicate(n int, name func(i int) string) int {
	if n <= pairwiseMax {
		for i := 1; i < n; i++ {
			x := name(i)
			for j := range i {
				if name(j) == x {
					return i
				}
			}
		}
		return -1
	}
	seen := make(map[string]struct{}, n)
	for i := range n {
		x := name(i)
		if _, ok := seen[x]; ok {
			return i
		}
		seen[x] = struct{}{}
	}
	return -1
}

func unwrapURL(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// plainReference reports whether s is a URI-reference in one of its plainest forms, which
// url.Parse always accepts: a path of unreserved characters and '/' that does not start
// with "//" ("/apis/v1", "sluice.loadkit"), or "scheme://host" followed by such a path
// (or none), the host of unreserved characters ("https://example.com/x"). Validate
// checks any other source with url.Parse, which costs an allocation and most of
// Validate's time; FuzzPlainReference holds the two to agreement.
func plainReference(s string) bool {
	if i := strings.Index(s, "://"); i > 0 {
		if !validScheme(s[:i]) {
			return false
		}
		host, path, _ := strings.Cut(s[i+3:], "/")
		return host != "" && unreservedPath(host, false) && unreservedPath(path, true)
	}
	return !strings.HasPrefix(s, "//") && unreservedPath(s, true)
}

// validScheme reports whether s is a URI scheme: a letter, then letters, digits, '+',
// '-' or '.'.
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// unreservedPath reports whether s holds only URI unreserved characters (letters,
// digits, '-', '.', '_', '~') and, if slash, '/'.
func unreservedPath(s string, slash bool) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == '~':
		case c == '/' && slash:
		default:
			return false
		}
	}
	return true
}
